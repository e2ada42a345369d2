package simcluster

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
)

// memEngine is an in-memory engine.Engine for simulated storage agents: a
// log of entries per shard and nothing else. Points are not indexed, so
// queries answer nothing: the simulation measures the control plane.
type memEngine struct {
	mu     sync.Mutex
	shards map[string]*memShard
}

func newMemEngine() *memEngine { return &memEngine{shards: map[string]*memShard{}} }

func (e *memEngine) Open(db string, shard int) (engine.Shard, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := fmt.Sprintf("%s/%d", db, shard)
	s := e.shards[k]
	if s == nil {
		s = &memShard{}
		e.shards[k] = s
	}
	return s, nil
}

func (e *memEngine) Drop(db string, shard int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.shards, fmt.Sprintf("%s/%d", db, shard))
	return nil
}

func (e *memEngine) Close() error { return nil }

// memShard keeps its whole log (simulated writes are few).
type memShard struct {
	mu  sync.Mutex
	log []engine.Entry // log[i].TxnID == i+1
}

func (s *memShard) Apply(e engine.Entry) error {
	_, err := s.Append(e)
	return err
}

// Append applies at once: the simulation has no fsync to share.
func (s *memShard) Append(e engine.Entry) (func() error, error) {
	if e.TxnID == 0 {
		return nil, fmt.Errorf("%w: got 0", engine.ErrTxnGap)
	}
	_, wait, err := s.Enqueue(&engine.Staged{Entry: e})
	return wait, err
}

func (s *memShard) NextTxnID() uint64 { return s.LastTxnID() + 1 }

// Stage keeps the entry as it is: the simulation encodes nothing.
func (s *memShard) Stage(e engine.Entry) (*engine.Staged, error) {
	return &engine.Staged{Entry: e}, nil
}

// Enqueue applies at once, numbering the entry under the shard's lock.
func (s *memShard) Enqueue(st *engine.Staged) (uint64, func() error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := st.Entry
	if e.TxnID == 0 {
		e.TxnID = uint64(len(s.log)) + 1
	}
	if e.TxnID != uint64(len(s.log))+1 {
		return 0, nil, fmt.Errorf("%w: got %d after %d", engine.ErrTxnGap, e.TxnID, len(s.log))
	}
	s.log = append(s.log, e)
	return e.TxnID, func() error { return nil }, nil
}

// SetTrimFloor does nothing: the simulated log is never trimmed.
func (s *memShard) SetTrimFloor(uint64) {}

func (s *memShard) LastEntry() (uint64, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) == 0 {
		return 0, 0
	}
	return uint64(len(s.log)), s.log[len(s.log)-1].Term
}

func (s *memShard) LastTxnID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(len(s.log))
}

func (s *memShard) LastTerm() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) == 0 {
		return 0
	}
	return s.log[len(s.log)-1].Term
}

func (s *memShard) Entries(after uint64, max int) ([]engine.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if after >= uint64(len(s.log)) {
		return nil, nil
	}
	out := s.log[after:]
	if max > 0 && len(out) > max {
		out = out[:max]
	}
	return append([]engine.Entry(nil), out...), nil
}

func (s *memShard) TermAt(txnID uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if txnID == 0 {
		return 0, nil
	}
	if txnID > uint64(len(s.log)) {
		return 0, engine.ErrNoEntry
	}
	return s.log[txnID-1].Term, nil
}

func (s *memShard) TruncateAfter(txnID uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if txnID < uint64(len(s.log)) {
		s.log = s.log[:txnID]
	}
	return nil
}

func (s *memShard) Query(string, map[string]string, int64, int64) ([]engine.Series, error) {
	return nil, nil
}

func (s *memShard) QueryLimited(string, map[string]string, int64, int64, engine.Limits) ([]engine.Series, error) {
	return nil, nil
}

// SeriesKeys visits nothing: the simulation's agents keep no points.
func (s *memShard) SeriesKeys(func(key string) error) error { return nil }

// AdmitTypes admits every point: the simulation keeps no field types.
func (s *memShard) AdmitTypes(points []lineproto.Point) ([]lineproto.Point, int, error) {
	return points, 0, nil
}

func (s *memShard) FieldTypes(string) map[string]models.FieldType { return nil }

func (s *memShard) Snapshot(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return json.NewEncoder(w).Encode(s.log)
}

func (s *memShard) Restore(r io.Reader) error {
	var log []engine.Entry
	if err := json.NewDecoder(r).Decode(&log); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = log
	return nil
}

func (s *memShard) Close() error { return nil }
