package statemachine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/internal/atomicfile"
	"go.uber.org/zap"
)

// BackupVersion is the format version of the local backup file this Cairn
// writes. Version 2 saves kinds by name; version 1 saved them as integers
// and is still read (see legacyKinds).
const BackupVersion = 2

// minBackupVersion is the oldest version still read.
const minBackupVersion = 1

// BackupFile is the local backup: the raw keys of every source, so a node that
// starts while etcd is down can serve, and `cairn restore` can load them into a
// new etcd.
type BackupFile struct {
	Format  string                  `json:"format"` // "cairn-state-backup"
	Version int                     `json:"version"`
	SavedAt int64                   `json:"saved_at"` // unix milliseconds
	Sources map[string]BackupSource `json:"sources"`
}

// BackupSource is one source's keys.
type BackupSource struct {
	Prefix  string     `json:"prefix"`
	Kind    Kind       `json:"kind"`
	Cluster string     `json:"cluster,omitempty"`
	Rev     int64      `json:"rev"`
	KVs     []BackupKV `json:"kvs"`
}

// BackupKV is one key. Values are Cairn's JSON records.
type BackupKV struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	ModRev    int64           `json:"mod_rev"`
	CreateRev int64           `json:"create_rev"`
}

// BackupFormat names the local backup format.
const BackupFormat = "cairn-state-backup"

// ReadBackupFile reads a local backup; (nil, nil) when the file does not exist.
func ReadBackupFile(path string) (*BackupFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state backup: %w", err)
	}
	f, err := ParseBackup(data)
	if err != nil {
		return nil, fmt.Errorf("state backup %s: %w", path, err)
	}
	return f, nil
}

// ErrBackupVersion: a local backup of a format or version this Cairn does
// not read.
var ErrBackupVersion = errors.New("unsupported state backup")

// ErrBackupNewer: a local backup of a newer version than this Cairn reads
// (written by a newer release); it wraps ErrBackupVersion.
var ErrBackupNewer = fmt.Errorf("%w: newer than this cairn", ErrBackupVersion)

// ParseBackup decodes a local backup of any version this Cairn reads.
func ParseBackup(data []byte) (*BackupFile, error) {
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("corrupt: %w", err)
	}
	if head.Format == BackupFormat && head.Version > BackupVersion {
		return nil, fmt.Errorf("%w: version %d (this cairn reads %q versions %d to %d)",
			ErrBackupNewer, head.Version, BackupFormat, minBackupVersion, BackupVersion)
	}
	if head.Format != BackupFormat || head.Version < minBackupVersion {
		return nil, fmt.Errorf("%w: format %q version %d (this cairn reads %q versions %d to %d)",
			ErrBackupVersion, head.Format, head.Version, BackupFormat, minBackupVersion, BackupVersion)
	}
	var f BackupFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("corrupt: %w", err)
	}
	return &f, nil
}

type rawKV struct {
	value     []byte
	modRev    int64
	createRev int64
}

// rawSource is one source's raw keys. kvs is a persistent Map, so a copy of
// every source's rawSource is a snapshot that costs O(sources) to take on
// the consumer; the writer does the O(keys) work off it.
type rawSource struct {
	src Source
	rev int64
	kvs Map[rawKV]
}

type rawChange struct {
	src       Source
	key       string
	value     []byte
	modRev    int64
	createRev int64
	del       bool
}

// recordRaw keeps a raw key for the backup; tok is the batch's (see
// ptoken): views handed to the writer are taken between batches.
func (m *Manager) recordRaw(c *rawChange, tok *ptoken) {
	rs, ok := m.raw[c.src.Name]
	if !ok {
		rs = &rawSource{src: c.src}
		m.raw[c.src.Name] = rs
	}
	rs.rev = max(rs.rev, c.modRev)
	// A value that is not JSON is not saved (it would not decode either):
	// checked once per change, not at every backup.
	if c.del || !json.Valid(c.value) {
		rs.kvs = rs.kvs.del(tok, c.key)
		return
	}
	rs.kvs = rs.kvs.set(tok, c.key, rawKV{value: c.value, modRev: c.modRev, createRev: c.createRev})
}

// rawView is a snapshot of the raw keys of every source.
type rawView map[string]rawSource

// rawSnapshot takes a snapshot of the raw keys: O(sources), on the consumer.
func (m *Manager) rawSnapshot() rawView {
	v := make(rawView, len(m.raw))
	for name, rs := range m.raw {
		v[name] = *rs
	}
	return v
}

// file builds the backup file of a snapshot (on the writer's goroutine).
// Values are shared: they are never mutated.
func (v rawView) file(now time.Time) *BackupFile {
	f := &BackupFile{Format: BackupFormat, Version: BackupVersion, SavedAt: now.UnixMilli(), Sources: map[string]BackupSource{}}
	for name, rs := range v {
		bs := BackupSource{Prefix: rs.src.Prefix, Kind: rs.src.Kind, Cluster: rs.src.Cluster, Rev: rs.rev, KVs: make([]BackupKV, 0, rs.kvs.Len())}
		for k, kv := range rs.kvs.All() {
			bs.KVs = append(bs.KVs, BackupKV{Key: k, Value: kv.value, ModRev: kv.modRev, CreateRev: kv.createRev})
		}
		sort.Slice(bs.KVs, func(i, j int) bool { return bs.KVs[i].Key < bs.KVs[j].Key })
		f.Sources[name] = bs
	}
	return f
}

// backupWriter writes backups off the consumer's goroutine, always the newest
// one handed to it; the consumer debounces how often it hands one over.
type backupWriter struct {
	path    string
	lg      *zap.Logger
	ch      chan rawView
	done    chan struct{}
	written atomic.Int64 // unix nanos of the last write
}

func newBackupWriter(path string, lg *zap.Logger) *backupWriter {
	return &backupWriter{path: path, lg: lg, ch: make(chan rawView, 1), done: make(chan struct{})}
}

func (w *backupWriter) age() float64 {
	t := w.written.Load()
	if t == 0 {
		return -1
	}
	return time.Since(time.Unix(0, t)).Seconds()
}

func (w *backupWriter) start(ctx context.Context) {
	if w.path == "" {
		close(w.done)
		return
	}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-ctx.Done():
				return
			case v := <-w.ch:
				w.write(v)
			}
		}
	}()
}

// submit hands over a backup, replacing one not yet written.
func (w *backupWriter) submit(v rawView) {
	for {
		select {
		case w.ch <- v:
			return
		default:
		}
		select {
		case <-w.ch:
		default:
		}
	}
}

func (w *backupWriter) flush(snap func() rawView) {
	if w.path == "" {
		return
	}
	<-w.done
	w.write(snap())
}

func (w *backupWriter) write(v rawView) {
	if err := WriteFileAtomic(w.path, v.file(time.Now())); err != nil {
		w.lg.Warn("state backup not written", zap.Error(err))
		return
	}
	w.written.Store(time.Now().UnixNano())
}

// WriteFileAtomic writes v as JSON to path through a synced temp file and a
// rename, so a crash leaves the old file or the new one, never half of one.
func WriteFileAtomic(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	// 0600: the cluster's whole state (node addresses, database layout) is
	// for this node's operator, not every local user.
	return atomicfile.Write(path, data, 0o600)
}
