package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	bolt "go.etcd.io/bbolt"
)

// Bucket layout of a shard file:
//
//	meta                last_txn, last_term, base_txn, base_term (big-endian u64)
//	log    txn       -> encoded Entry (the last RetainEntries entries)
//	undo   txn       -> what each point of that entry replaced, for TruncateAfter
//	series seriesKey -> bucket: ts key -> float64 bits (big-endian)
//
// base_txn/base_term describe the newest trimmed entry: the log holds exactly
// (base_txn, last_txn].
var (
	bucketMeta   = []byte("meta")
	bucketLog    = []byte("log")
	bucketUndo   = []byte("undo")
	bucketSeries = []byte("series")

	keyLastTxn  = []byte("last_txn")
	keyLastTerm = []byte("last_term")
	keyBaseTxn  = []byte("base_txn")
	keyBaseTerm = []byte("base_term")
)

// seriesFill packs series pages fuller than bbolt's default half: points mostly
// arrive in time order, so pages are appended to, not split in the middle.
const seriesFill = 0.9

type boltShard struct {
	path   string
	retain uint64

	// wmu serializes writers (Apply, TruncateAfter, Restore) so the txn checks
	// and the cached txn/term below move together. mu guards db: readers and
	// writers hold it shared, Restore and Close exclusively to swap or drop it.
	wmu sync.Mutex
	mu  sync.RWMutex
	db  *bolt.DB

	lastTxn  atomic.Uint64
	lastTerm atomic.Uint64

	onClose func()
}

type shardMeta struct {
	lastTxn, lastTerm, baseTxn, baseTerm uint64
}

func boltOptions() *bolt.Options {
	return &bolt.Options{
		Timeout: 5 * time.Second, // another process holding the file is an error, not a hang
		// Rebuilding the freelist at open is cheaper overall than writing it on
		// every commit, and the map freelist is fast for large files.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	}
}

func openShard(path string, retain uint64) (*boltShard, error) {
	db, err := openBolt(path)
	if err != nil {
		return nil, err
	}
	s := &boltShard{path: path, retain: retain, db: db}
	if err := s.loadMeta(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

func openBolt(path string) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, boltOptions())
	if err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketLog, bucketUndo, bucketSeries} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("engine: init %s: %w", path, err)
	}
	return db, nil
}

func (s *boltShard) loadMeta() error {
	return s.db.View(func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil {
			return err
		}
		s.lastTxn.Store(m.lastTxn)
		s.lastTerm.Store(m.lastTerm)
		return nil
	})
}

func readMeta(tx *bolt.Tx) (shardMeta, error) {
	b := tx.Bucket(bucketMeta)
	if b == nil {
		return shardMeta{}, fmt.Errorf("%w: no meta bucket", ErrBadSnapshot)
	}
	get := func(k []byte) uint64 {
		if v := b.Get(k); len(v) == 8 {
			return beUint64(v)
		}
		return 0
	}
	return shardMeta{get(keyLastTxn), get(keyLastTerm), get(keyBaseTxn), get(keyBaseTerm)}, nil
}

func writeMeta(tx *bolt.Tx, m shardMeta) error {
	b := tx.Bucket(bucketMeta)
	for _, kv := range []struct {
		k []byte
		v uint64
	}{{keyLastTxn, m.lastTxn}, {keyLastTerm, m.lastTerm}, {keyBaseTxn, m.baseTxn}, {keyBaseTerm, m.baseTerm}} {
		if err := b.Put(kv.k, u64Key(kv.v)); err != nil {
			return err
		}
	}
	return nil
}

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

func (s *boltShard) LastTxnID() uint64 { return s.lastTxn.Load() }
func (s *boltShard) LastTerm() uint64  { return s.lastTerm.Load() }

// closed is stable while the caller holds wmu, which Close also takes.
func (s *boltShard) closed() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.db == nil
}

// view runs fn in a read transaction unless the shard is closed.
func (s *boltShard) view(fn func(*bolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	return s.db.View(fn)
}

// update runs fn in one write transaction, committed with fsync.
func (s *boltShard) update(fn func(*bolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return ErrClosed
	}
	return s.db.Update(fn)
}

func (s *boltShard) Apply(e Entry) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed() {
		return ErrClosed
	}
	if want := s.lastTxn.Load() + 1; e.TxnID != want {
		return fmt.Errorf("%w: got %d, want %d", ErrTxnGap, e.TxnID, want)
	}
	if last := s.lastTerm.Load(); e.Term < last {
		return fmt.Errorf("%w: got %d, last %d", ErrTermRegress, e.Term, last)
	}
	err := s.update(func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil {
			return err
		}
		undo, err := writePoints(tx.Bucket(bucketSeries), e.Points)
		if err != nil {
			return err
		}
		txnKey := u64Key(e.TxnID)
		if err := tx.Bucket(bucketLog).Put(txnKey, e.appendBinary(nil)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketUndo).Put(txnKey, undo); err != nil {
			return err
		}
		m.lastTxn, m.lastTerm = e.TxnID, e.Term
		if err := trimLog(tx, &m, s.retain); err != nil {
			return err
		}
		return writeMeta(tx, m)
	})
	if err != nil {
		return fmt.Errorf("engine: apply txn %d: %w", e.TxnID, err)
	}
	s.lastTxn.Store(e.TxnID)
	s.lastTerm.Store(e.Term)
	return nil
}

// writePoints stores the points and returns the undo record of what they
// replaced. Points are written grouped by series and in ts order, so each
// series bucket is opened once and its pages are filled sequentially; a stable
// sort keeps the last of two same-(series, ts) points the winner.
func writePoints(series *bolt.Bucket, points []lineproto.Point) ([]byte, error) {
	n := len(points)
	keyBuf := make([]byte, 0, n*32)
	keyEnd := make([]int, n)
	for i := range points {
		p := &points[i]
		keyBuf = lineproto.AppendSeriesKey(keyBuf, p.Metric, p.Tags, p.Field)
		keyEnd[i] = len(keyBuf)
	}
	key := func(i int) []byte {
		start := 0
		if i > 0 {
			start = keyEnd[i-1]
		}
		return keyBuf[start:keyEnd[i]:keyEnd[i]]
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if c := bytes.Compare(key(a), key(b)); c != 0 {
			return c
		}
		return cmpInt64(points[a].TS, points[b].TS)
	})
	// bbolt keeps references to keys and values until commit: one buffer each.
	kv := make([]byte, n*16)
	undo := make([]byte, 0, n*4)
	var (
		b      *bolt.Bucket
		c      *bolt.Cursor
		curKey []byte
		newest []byte // the series' newest ts key before this batch
	)
	for j, i := range order {
		if k := key(i); b == nil || !bytes.Equal(k, curKey) {
			var err error
			if b, err = series.CreateBucketIfNotExists(k); err != nil {
				return nil, err
			}
			b.FillPercent = seriesFill
			c, curKey = b.Cursor(), k
			newest, _ = c.Last()
			newest = slices.Clone(newest)
		}
		tk, v := kv[j*16:j*16+8:j*16+8], kv[j*16+8:j*16+16:j*16+16]
		putTSKey(tk, points[i].TS)
		putFloat(v, points[i].Value)
		op := undoOp{point: i}
		// Points past the series' newest one cannot overwrite anything, which
		// spares the lookup for the usual in-order writes.
		if newest != nil && bytes.Compare(tk, newest) <= 0 {
			if k, old := c.Seek(tk); bytes.Equal(k, tk) && len(old) == 8 {
				op.hadPrev, op.prev = true, beUint64(old)
			}
		}
		undo = appendUndo(undo, op)
		if err := b.Put(tk, v); err != nil {
			return nil, err
		}
	}
	return undo, nil
}

func putFloat(dst []byte, f float64) { binary.BigEndian.PutUint64(dst, math.Float64bits(f)) }

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// trimLog drops log and undo records beyond the retention window, advancing base.
func trimLog(tx *bolt.Tx, m *shardMeta, retain uint64) error {
	logB, undoB := tx.Bucket(bucketLog), tx.Bucket(bucketUndo)
	for m.lastTxn-m.baseTxn > retain {
		next := m.baseTxn + 1
		k := u64Key(next)
		if v := logB.Get(k); v != nil {
			_, term, err := entryHeader(v)
			if err != nil {
				return err
			}
			m.baseTerm = term
		}
		if err := logB.Delete(k); err != nil {
			return err
		}
		if err := undoB.Delete(k); err != nil {
			return err
		}
		m.baseTxn = next
	}
	return nil
}

func (s *boltShard) TruncateAfter(txnID uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed() {
		return ErrClosed
	}
	if txnID >= s.lastTxn.Load() {
		return nil
	}
	var m shardMeta
	err := s.update(func(tx *bolt.Tx) error {
		var err error
		if m, err = readMeta(tx); err != nil {
			return err
		}
		if txnID < m.baseTxn {
			return fmt.Errorf("%w: truncate to %d, log starts after %d", ErrCompacted, txnID, m.baseTxn)
		}
		for t := m.lastTxn; t > txnID; t-- {
			if err := undoEntry(tx, t); err != nil {
				return fmt.Errorf("undo txn %d: %w", t, err)
			}
		}
		m.lastTxn, m.lastTerm = txnID, m.baseTerm
		if txnID > m.baseTxn {
			_, term, err := entryHeader(tx.Bucket(bucketLog).Get(u64Key(txnID)))
			if err != nil {
				return err
			}
			m.lastTerm = term
		}
		return writeMeta(tx, m)
	})
	if err != nil {
		return fmt.Errorf("engine: truncate after %d: %w", txnID, err)
	}
	s.lastTxn.Store(m.lastTxn)
	s.lastTerm.Store(m.lastTerm)
	return nil
}

// undoEntry rolls back one entry's point writes, newest first, deletes series
// left empty, and removes the entry from the log.
func undoEntry(tx *bolt.Tx, txn uint64) error {
	logB, undoB, series := tx.Bucket(bucketLog), tx.Bucket(bucketUndo), tx.Bucket(bucketSeries)
	k := u64Key(txn)
	var e Entry
	if err := e.UnmarshalBinary(logB.Get(k)); err != nil {
		return err
	}
	ops, err := decodeUndo(undoB.Get(k), len(e.Points))
	if err != nil {
		return err
	}
	touched := make(map[string]struct{})
	tk := make([]byte, 8)
	for _, op := range slices.Backward(ops) {
		p := &e.Points[op.point]
		sk := lineproto.AppendSeriesKey(nil, p.Metric, p.Tags, p.Field)
		b := series.Bucket(sk)
		if b == nil {
			return fmt.Errorf("%w: series %q missing", ErrCorrupt, sk)
		}
		putTSKey(tk, p.TS)
		if op.hadPrev {
			err = b.Put(slices.Clone(tk), binary.BigEndian.AppendUint64(nil, op.prev))
		} else {
			err = b.Delete(tk)
		}
		if err != nil {
			return err
		}
		touched[string(sk)] = struct{}{}
	}
	for sk := range touched {
		if b := series.Bucket([]byte(sk)); b != nil {
			if first, _ := b.Cursor().First(); first == nil {
				if err := series.DeleteBucket([]byte(sk)); err != nil {
					return err
				}
			}
		}
	}
	if err := logB.Delete(k); err != nil {
		return err
	}
	return undoB.Delete(k)
}

func (s *boltShard) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	db := s.db
	s.db = nil
	s.mu.Unlock()
	if db == nil {
		return ErrClosed
	}
	if s.onClose != nil {
		s.onClose()
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("engine: close %s: %w", s.path, err)
	}
	return nil
}
