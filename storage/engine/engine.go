package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrTxnGap: Apply got a txn id other than LastTxnID()+1.
	ErrTxnGap = errors.New("engine: txn id is not the next one")
	// ErrTermRegress: Apply got a term lower than the last applied entry's.
	ErrTermRegress = errors.New("engine: term lower than the last entry's")
	// ErrCompacted: the entries asked for were trimmed; a full sync is needed.
	ErrCompacted = errors.New("engine: entries compacted, full sync needed")
	// ErrNoEntry: the txn id is past the last applied entry.
	ErrNoEntry = errors.New("engine: no such entry")
	// ErrClosed: the shard or engine was closed.
	ErrClosed = errors.New("engine: closed")
	// ErrBadName: a database name or shard id that cannot name a file.
	ErrBadName = errors.New("engine: bad database name or shard id")
	// ErrBadSnapshot: Restore was given something that is not a shard snapshot.
	ErrBadSnapshot = errors.New("engine: not a shard snapshot")
)

// Entry is one replicated batch: the unit of the replication log. Point tags
// must be sorted by key, as lineproto.Parse returns them, because the series key
// (and so the stored series) is built from them in order.
type Entry struct {
	TxnID  uint64
	Term   uint64
	Points []lineproto.Point
	// Delete, when not nil, makes the entry a delete (delete.go): it holds
	// no points.
	Delete *wire.Delete
	// Prepared, when not nil, is Prepare(Points), made ahead (see
	// Prepared). It is not part of the entry's encoding.
	Prepared *Prepared
}

// Series is one query result series. There is one Series per (tag set, field);
// the field is reported as the tag "_field", except for the conventional field
// "value" which adds no tag, so single-value metrics read naturally.
type Series struct {
	Metric string            `json:"metric"`
	Tags   map[string]string `json:"tags"`
	Points []SeriesPoint     `json:"points"`
}

// FieldTag, DefaultField and SeriesPoint are the shared vocabulary of
// shard reads (models), which the query evaluator reads through Scanner
// without knowing the engine.
const (
	FieldTag     = models.FieldTag
	DefaultField = models.DefaultField
)

// SeriesPoint is one sample (models.SeriesPoint).
type SeriesPoint = models.SeriesPoint

// Shard is one replica of one shard of one database.
type Shard interface {
	// Apply writes a batch atomically and durably at e.TxnID, which must be
	// NextTxnID() (else ErrTxnGap). Points overwrite the same series and ts.
	// It is Append and its wait.
	Apply(e Entry) error
	// Append queues e for the shard's next group commit and returns at once
	// with a wait that returns nil once e is durable and counted in
	// LastTxnID, or the error that kept it out. e.TxnID must be NextTxnID()
	// (else ErrTxnGap). Entries queued while a commit is under way are
	// committed together, with one fsync. A failed commit fails every entry
	// queued after it too, and TruncateAfter and Restore fail the entries
	// queued and not committed yet (their txn ids no longer follow).
	Append(e Entry) (wait func() error, err error)
	// NextTxnID is the txn id the next Append takes: one past the last entry
	// applied or queued.
	NextTxnID() uint64
	// Stage and Enqueue are Append in two steps, so that a caller that
	// orders its writes to a shard under a lock of its own holds it for
	// the numbering and the queueing alone: Stage does everything that
	// needs no place in the log (the checks, encoding the points, building
	// their keys) and refuses what Append would; Enqueue numbers the staged
	// entry (its TxnID, or the next one when 0), queues it and returns its
	// txn id with a wait as Append's. A Staged is queued once, by the shard
	// that staged it.
	Stage(e Entry) (*Staged, error)
	Enqueue(st *Staged) (txn uint64, wait func() error, err error)
	// SetTrimFloor says replication no longer needs the entries up to txn:
	// the log drops them once they are flushed. Entries past it are kept
	// within the retention bounds (WithRetainEntries, WithRetainBytes); a
	// follower further behind gets a snapshot. 0 keeps the bounds alone.
	SetTrimFloor(txn uint64)
	// LastTxnID is the txn id of the last applied entry (0 when empty).
	LastTxnID() uint64
	// LastTerm is the term of the last applied entry.
	LastTerm() uint64
	// LastEntry is LastTxnID and LastTerm read together: commits publish
	// them outside any lock the caller can hold.
	LastEntry() (txn, term uint64)
	// Entries returns up to max entries with TxnID > after, in order; max <= 0
	// means no limit. ErrCompacted when some were trimmed from the log.
	Entries(after uint64, max int) ([]Entry, error)
	// TermAt returns the term of entry txnID (0 for 0); ErrCompacted if trimmed,
	// ErrNoEntry past the last entry.
	TermAt(txnID uint64) (uint64, error)
	// TruncateAfter removes the entries after txnID and restores every point
	// they wrote to its previous value; ErrCompacted if those are trimmed.
	TruncateAfter(txnID uint64) error
	// Query returns the series of metric whose tags contain all of match (a
	// FieldTag match selects the field), with points in [start, end] by ts.
	Query(metric string, match map[string]string, start, end int64) ([]Series, error)
	// QueryLimited is Query that stops reading, with ErrTooLarge, as soon as
	// the answer holds more series or points than lim allows.
	QueryLimited(metric string, match map[string]string, start, end int64, lim Limits) ([]Series, error)
	// SeriesKeys calls visit once per stored series (flushed or not) with its
	// lineproto series key, in no promised order, reading no points; a visit
	// error ends the walk and is returned. InfluxQL's SHOW statements use it.
	SeriesKeys(visit func(key string) error) error
	// AdmitTypes is what a leader asks before it logs points: those whose
	// field is new to the shard (its type is claimed for it) or of the
	// type the shard holds, in order (points itself when all are), and how
	// many others it refused with the first refusal (a *Conflict,
	// ErrFieldTypeConflict). Followers take what their leader logged.
	AdmitTypes(points []lineproto.Point) (kept []lineproto.Point, refused int, first error)
	// FieldTypes is the type of every field of metric the shard holds.
	FieldTypes(metric string) map[string]models.FieldType
	// Snapshot writes a consistent full copy, for a full sync.
	Snapshot(w io.Writer) error
	// Restore replaces the content with a snapshot, log and txn id included.
	Restore(r io.Reader) error
	Close() error
}

// Engine opens and drops the shard replicas of one node.
type Engine interface {
	// Open returns the shard, the same Shard while it stays open.
	Open(db string, shard int) (Shard, error)
	// Drop closes the shard if open and deletes its data.
	Drop(db string, shard int) error
	// Close closes every open shard.
	Close() error
}

// DefaultRetainEntries is how many recent entries the log keeps for followers.
const DefaultRetainEntries = 10000

// DefaultFlushPoints is how many points a shard's memtable holds before they
// are written as blocks (unless the engine's memory budget says so first):
// the more points a flush carries per series, the fewer small blocks there
// are to compact.
const DefaultFlushPoints = 1_000_000

// DefaultFlushInterval is how long a shard's memtable may sit before it is
// flushed anyway, which bounds the memory an idle shard holds and the log a
// restart replays; the memory budget bounds the rest. Longer intervals make
// fewer, larger blocks.
const DefaultFlushInterval = 10 * time.Second

// Option tunes NewBoltEngine.
type Option func(*options)

type options struct {
	retain        uint64
	retainBytes   int64
	flushPoints   int
	flushInterval time.Duration
	compactRate   int
	compactEvery  time.Duration
	memBytes      int64
	segmentBytes  int64
	flushReport   func(db string, shard int, err error)
	logReport     func(err error)
	faults        *Faults
	packs         bool // AllowPacks(true) at open (tests)
}

// WithFlushReport has f told of every background flush that fails, and of
// the first that succeeds after a failure (err nil): nothing else sees
// them, as no writer waits for a background flush.
func WithFlushReport(f func(db string, shard int, err error)) Option {
	return func(o *options) { o.flushReport = f }
}

// DefaultRetainBytes bounds the log a shard keeps for followers by size, on
// top of the entry count: a follower further behind gets a full sync.
const DefaultRetainBytes = 32 << 20

// WithRetainBytes sets the size bound of the log kept for followers (at
// least 1 byte; unflushed entries are always kept).
func WithRetainBytes(n int64) Option {
	return func(o *options) { o.retainBytes = max(n, 1) }
}

// WithMemtableBytes sets the memory budget of all memtables of the engine
// together; reaching it flushes. 0 or less: no budget (the per-shard point
// limit and the interval still apply).
func WithMemtableBytes(n int64) Option {
	return func(o *options) { o.memBytes = max(n, 0) }
}

// DefaultMemtableBytes is 1/64 of the machine's memory, between 32 MiB and
// 64 MiB: at about 24 bytes a point, 1.4-2.8M points, enough for 40k series
// to flush in blocks of useful size, small enough to keep a node's resident
// memory bounded.
func DefaultMemtableBytes() int64 {
	const lo, hi = 32 << 20, 64 << 20
	total := memTotal()
	if total <= 0 {
		return hi
	}
	return min(max(total/64, lo), hi)
}

// memTotal reads the machine's memory from /proc/meminfo (0 if unknown).
func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

// WithCompactRate sets the pace of background compaction in block bytes per
// second for the whole engine; 0 or less turns it off (Compacter still works).
func WithCompactRate(bytesPerSec int) Option {
	return func(o *options) { o.compactRate = max(bytesPerSec, 0) }
}

// WithRetainEntries sets how many recent log entries each shard keeps (at least
// 1); followers further behind need a full sync.
func WithRetainEntries(n int) Option {
	return func(o *options) { o.retain = uint64(max(n, 1)) }
}

// WithFlushPoints sets how many points a shard buffers in memory (on top of
// the durable log) before flushing them into its series (at least 1).
func WithFlushPoints(n int) Option {
	return func(o *options) { o.flushPoints = max(n, 1) }
}

// WithFlushInterval sets how long buffered points may wait before a flush; 0
// or less turns the time-based flush off, leaving only the size trigger.
func WithFlushInterval(d time.Duration) Option {
	return func(o *options) { o.flushInterval = d }
}

type shardID struct {
	db    string
	shard int
}

type boltEngine struct {
	dir  string
	opts options
	wal  *wal
	lim  *rateLimiter // paces the compaction of every shard together
	mem  *memBudget   // memtable bytes of every shard together

	mu     sync.Mutex
	shards map[shardID]*boltShard
	closed bool
}

// NewBoltEngine returns the bbolt engine keeping shard files at
// dir/<db>/<shard>.db and its write-ahead log in dir/log.d (a name no
// database can take).
func NewBoltEngine(dir string, opts ...Option) (Engine, error) {
	o := options{retain: DefaultRetainEntries, retainBytes: DefaultRetainBytes, flushPoints: DefaultFlushPoints,
		flushInterval: DefaultFlushInterval, compactRate: DefaultCompactRate, compactEvery: time.Second,
		memBytes: DefaultMemtableBytes(), segmentBytes: defaultSegmentBytes}
	for _, opt := range opts {
		opt(&o)
	}
	lim := &rateLimiter{rate: float64(max(o.compactRate, 1))}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("engine: create data dir: %w", err)
	}
	w, err := openWAL(filepath.Join(dir, walDirName), o.segmentBytes)
	if err != nil {
		return nil, err
	}
	w.faults, w.report = o.faults, o.logReport
	return &boltEngine{dir: dir, opts: o, wal: w, lim: lim, mem: &memBudget{}, shards: make(map[shardID]*boltShard)}, nil
}

// collectLog removes the write-ahead log segments no shard needs any more.
// A failure only leaves them for the next try.
func (e *boltEngine) collectLog() {
	_ = e.wal.collect(func(id shardID) bool {
		path, err := e.path(id)
		if err != nil {
			return false
		}
		_, err = os.Stat(path)
		return !errors.Is(err, os.ErrNotExist)
	})
}

func (e *boltEngine) path(id shardID) (string, error) {
	if !validName(id.db) || id.shard < 0 {
		return "", fmt.Errorf("%w: %q/%d", ErrBadName, id.db, id.shard)
	}
	return filepath.Join(e.dir, id.db, strconv.Itoa(id.shard)+".db"), nil
}

// validName keeps database names to the API's [A-Za-z0-9_-]{1,64}, which also
// keeps them from escaping the data directory.
func validName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (e *boltEngine) Open(db string, shard int) (Shard, error) {
	id := shardID{db, shard}
	path, err := e.path(id)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, ErrClosed
	}
	if s, ok := e.shards[id]; ok {
		return s, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("engine: create db dir: %w", err)
	}
	s, err := openShard(path, id, e.opts, e.lim, e.mem, e.wal, e.collectLog)
	e.mem.charge(0, 1)
	if err != nil {
		return nil, err
	}
	s.onClose = func() { e.forget(id, s) }
	e.shards[id] = s
	return s, nil
}

// forget drops a shard closed by its owner so the next Open reopens the file.
func (e *boltEngine) forget(id shardID, s *boltShard) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.shards[id] == s {
		delete(e.shards, id)
	}
}

func (e *boltEngine) Drop(db string, shard int) error {
	id := shardID{db, shard}
	path, err := e.path(id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	s := e.shards[id]
	delete(e.shards, id)
	e.mu.Unlock()
	if s != nil {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			return err
		}
		e.wal.take(s.inc) // its records are dead once the file is gone
	}
	// The staging files of a restore or a file compaction that a crash
	// interrupted go too.
	for _, p := range []string{path, path + ".restore", path + ".compact"} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("engine: drop %s/%d: %w", db, shard, err)
		}
	}
	if err := errors.Join(removePartFiles(path), removePartFiles(path+".restore")); err != nil {
		return fmt.Errorf("engine: drop %s/%d: %w", db, shard, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return err
	}
	e.collectLog()
	return nil
}

func (e *boltEngine) Close() error {
	e.mu.Lock()
	e.closed = true
	open := make([]*boltShard, 0, len(e.shards))
	for _, s := range e.shards {
		open = append(open, s)
	}
	clear(e.shards)
	e.mu.Unlock()
	var errs []error
	for _, s := range open {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	if err := e.wal.close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// syncDir makes a create, rename or remove in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("engine: open dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("engine: sync dir: %w", err)
	}
	return nil
}

// AppendSeriesJSON appends series as the JSON array json.Marshal would write,
// without reflection: query answers can carry millions of points.
func AppendSeriesJSON(dst []byte, series []Series) []byte {
	dst = append(dst, '[')
	for i, s := range series {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"metric":`...)
		dst = appendJSONString(dst, s.Metric)
		dst = append(dst, `,"tags":{`...)
		for j, k := range slices.Sorted(maps.Keys(s.Tags)) {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k)
			dst = append(dst, ':')
			dst = appendJSONString(dst, s.Tags[k])
		}
		dst = append(dst, `},"points":[`...)
		for j, p := range s.Points {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = p.AppendJSON(dst)
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, ']')
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s) // strings always marshal
	return append(dst, b...)
}
