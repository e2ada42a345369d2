package engine

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cairn-db/cairn/storage/wire"
	bolt "go.etcd.io/bbolt"
)

// A shard's replication log is its records in the engine's write-ahead log
// (wal.go); logIndex locates them. The shard's bbolt file keeps what the log
// needs to be read back: its incarnation (keyInc), and in the meta bucket
// base_txn/base_term (the persisted start of the log, up to which the
// segments may be removed), flushed_txn, and last_txn/last_term, which in
// this format describe the last flushed entry: the last entry when the log
// holds no record of the shard any more. The log bucket stays empty; files
// of the previous format have their log moved into the write-ahead log at
// open (migrateLog).

var keyInc = []byte("wal_inc")

// logPos is where one entry of the shard lies in the write-ahead log.
type logPos struct {
	walPos
	term uint64
}

// logIndex is a shard's log: entries (base, base+len(pos)]. base/baseTerm
// describe the newest trimmed entry.
type logIndex struct {
	base, baseTerm uint64
	pos            []logPos
	bytes          int64 // payload bytes of pos
}

func (l *logIndex) last() (txn, term uint64) {
	if len(l.pos) == 0 {
		return l.base, l.baseTerm
	}
	return l.base + uint64(len(l.pos)), l.pos[len(l.pos)-1].term
}

func (l *logIndex) add(p logPos) {
	l.pos = append(l.pos, p)
	l.bytes += int64(p.n)
}

// termAt is the term of txn, for base <= txn <= last.
func (l *logIndex) termAt(txn uint64) uint64 {
	if txn == l.base {
		return l.baseTerm
	}
	return l.pos[txn-l.base-1].term
}

// cutAfter drops the entries past txn (base <= txn <= last).
func (l *logIndex) cutAfter(txn uint64) {
	for _, p := range l.pos[txn-l.base:] {
		l.bytes -= int64(p.n)
	}
	l.pos = l.pos[:txn-l.base]
}

// dropTo trims the entries up to txn (base <= txn <= last).
func (l *logIndex) dropTo(txn uint64) {
	if txn == l.base {
		return
	}
	l.baseTerm = l.termAt(txn)
	for _, p := range l.pos[:txn-l.base] {
		l.bytes -= int64(p.n)
	}
	l.pos = l.pos[txn-l.base:]
	l.base = txn
}

// trim drops entries up to the floor and beyond the retention window (count
// and bytes), never past flushed: unflushed entries exist only in the log.
func (l *logIndex) trim(floor, retain uint64, retainBytes int64, flushed uint64) {
	last, _ := l.last()
	to, bytes := l.base, l.bytes
	for (to < floor || last-to > retain || bytes > retainBytes) && to < flushed {
		bytes -= int64(l.pos[to-l.base].n)
		to++
	}
	l.dropTo(to)
}

// buildIndex replays a shard's records, oldest first, against its meta.
func buildIndex(recs []walRec, m shardMeta) (logIndex, error) {
	var l logIndex
	started := false
	for _, r := range recs {
		last, _ := l.last()
		switch {
		case r.kind == recEntry && (!started || r.txn == last+1):
			if !started {
				if r.txn == 0 {
					return l, fmt.Errorf("%w: log record of txn 0", ErrCorrupt)
				}
				l.base, l.baseTerm, started = r.txn-1, r.prevTerm, true
			}
			l.add(logPos{r.pos, r.term})
		case r.kind == recTruncate && (!started || r.txn < l.base):
			// The records before the cut were removed: it starts the log.
			l = logIndex{base: r.txn, baseTerm: r.term}
			started = true
		case r.kind == recTruncate && r.txn <= last:
			l.cutAfter(r.txn)
		default:
			return l, fmt.Errorf("%w: log record kind %d txn %d after txn %d", ErrCorrupt, r.kind, r.txn, last)
		}
	}
	if !started {
		l.base, l.baseTerm = m.lastTxn, m.lastTerm
	}
	last, _ := l.last()
	if last < m.lastTxn || l.base > m.flushedTxn {
		return l, fmt.Errorf("%w: log holds (%d, %d], shard file flushed up to %d", ErrCorrupt, l.base, last, m.flushedTxn)
	}
	if m.baseTxn > l.base {
		l.dropTo(m.baseTxn)
	}
	return l, nil
}

// newIncarnation returns a random nonzero id.
func newIncarnation() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		if v := binary.BigEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// encodeEntries frames entries (base, ...] of incarnation inc as records.
func encodeEntries(id shardID, inc uint64, prevTerm uint64, entries []Entry) ([]byte, []walRec) {
	points := make([][]byte, len(entries))
	for i, e := range entries {
		if e.Delete == nil {
			points[i] = wire.AppendPoints(make([]byte, 0, pointBytesHint*len(e.Points)), e.Points, nil)
		}
	}
	return frameEntries(nil, id, inc, prevTerm, entries, points)
}

// frameEntries is encodeEntries appending to dst[:0], with the points part
// of each entry's payload (appendPointsEach) given: the payload is
// Entry.appendBinary, its head written here. A delete entry's payload is
// all written here (its points part is empty).
func frameEntries(dst []byte, id shardID, inc uint64, prevTerm uint64, entries []Entry, points [][]byte) ([]byte, []walRec) {
	n := 0
	for _, p := range points {
		n += recordBytesHint + len(p)
	}
	data := slices.Grow(dst[:0], n)
	recs := make([]walRec, len(entries))
	for i, e := range entries {
		r := walRec{kind: recEntry, inc: inc, db: id.db, shard: id.shard, txn: e.TxnID, term: e.Term, prevTerm: prevTerm}
		start := len(data)
		var off int
		data, off = appendRecord(data, r, func(b []byte) []byte {
			if e.Delete != nil {
				return e.appendBinary(b)
			}
			return append(wire.AppendHead(b, e.TxnID, e.Term, wire.Version(e.Points)), points[i]...)
		})
		r.pos = walPos{off: int64(start + off), n: len(data) - start - off}
		recs[i] = r
		prevTerm = e.Term
	}
	return data, recs
}

// What a record takes besides its points, and a point of a loadgen-like
// batch (ts, value, a few string references, some strings in full), as
// encoded by appendRecord and Entry.appendBinary, with some room: such a
// point takes 31-32 bytes, and a buffer one byte short doubles.
const recordBytesHint, pointBytesHint = 64, 40

// logPositions turns records just appended into index positions.
func logPositions(recs []walRec) []logPos {
	out := make([]logPos, len(recs))
	for i, r := range recs {
		out[i] = logPos{r.pos, r.term}
	}
	return out
}

// readLog decodes the published entries (after, upto], at most limit of them
// (limit <= 0: all). ErrCompacted if after is before the log's start.
func (s *boltShard) readLog(after, upto uint64, limit int) ([]Entry, error) {
	s.lmu.RLock()
	if after < s.idx.base {
		base := s.idx.base
		s.lmu.RUnlock()
		return nil, fmt.Errorf("%w: asked after %d, log starts after %d", ErrCompacted, after, base)
	}
	last, _ := s.idx.last()
	upto = min(upto, last)
	var ps []logPos
	if upto > after {
		ps = append(ps, s.idx.pos[after-s.idx.base:upto-s.idx.base]...)
	}
	s.lmu.RUnlock()
	if limit > 0 && len(ps) > limit {
		ps = ps[:limit]
	}
	out := make([]Entry, len(ps))
	var buf []byte
	for i, p := range ps {
		b, err := s.wal.read(p.walPos, buf)
		if err != nil {
			return nil, err
		}
		buf = b
		if err := out[i].UnmarshalBinary(b); err != nil {
			return nil, fmt.Errorf("log txn %d: %w", after+uint64(i)+1, err)
		}
		if out[i].TxnID != after+uint64(i)+1 {
			return nil, fmt.Errorf("%w: log position of txn %d holds txn %d", ErrCorrupt, after+uint64(i)+1, out[i].TxnID)
		}
	}
	return out, nil
}

// replayLog rebuilds a memtable from the log entries (from, to].
func (s *boltShard) replayLog(from, to uint64) (*memtable, error) {
	mt := newMemtable(s.ix)
	if to <= from {
		return mt, nil
	}
	es, err := s.readLog(from, to, 0)
	if err != nil {
		return nil, err
	}
	if uint64(len(es)) != to-from {
		return nil, fmt.Errorf("%w: log misses unflushed txn %d (flushed up to %d, last %d)", ErrCorrupt, from+uint64(len(es))+1, from, to)
	}
	now := time.Now()
	for _, e := range es {
		mt.insert(e, nil, now)
	}
	return mt, nil
}

// legacyLog reads the log bucket of a file of the previous format: entries
// (base, last] in order.
func legacyLog(tx *bolt.Tx, m shardMeta) ([]Entry, error) {
	b := tx.Bucket(bucketLog)
	var out []Entry
	for t := m.baseTxn + 1; t <= m.lastTxn; t++ {
		var e Entry
		if err := e.UnmarshalBinary(b.Get(u64Key(t))); err != nil {
			return nil, fmt.Errorf("log txn %d: %w", t, err)
		}
		if e.TxnID != t {
			return nil, fmt.Errorf("%w: log key %d holds txn %d", ErrCorrupt, t, e.TxnID)
		}
		out = append(out, e)
	}
	return out, nil
}

// clearLegacyLog empties the log bucket and makes the meta describe the file
// in this format: last is the last flushed entry, whose term flushedTerm is.
func clearLegacyLog(tx *bolt.Tx, m shardMeta, inc, flushedTerm uint64) error {
	if err := tx.DeleteBucket(bucketLog); err != nil {
		return err
	}
	if _, err := tx.CreateBucket(bucketLog); err != nil {
		return err
	}
	m.lastTxn, m.lastTerm = m.flushedTxn, flushedTerm
	if err := writeMeta(tx, m); err != nil {
		return err
	}
	return tx.Bucket(bucketMeta).Put(keyInc, u64Key(inc))
}

// termOf finds the term of txn among base and entries (base, ...].
func termOf(txn, base, baseTerm uint64, entries []Entry) uint64 {
	if txn == base || txn-base > uint64(len(entries)) {
		return baseTerm
	}
	return entries[txn-base-1].Term
}

// flushTrim returns the term of upto, the last entry a flush is writing, and
// the log start that flush persists: the trim the next commit would make
// once upto is flushed. The caller holds fmu.
func (s *boltShard) flushTrim(upto uint64) (uptoTerm, base, baseTerm uint64) {
	s.lmu.RLock()
	defer s.lmu.RUnlock()
	l := s.idx // trims a copy of the slice header only
	uptoTerm = l.termAt(upto)
	l.trim(s.trimFloor.Load(), s.retain, s.retainBytes, upto)
	return uptoTerm, l.base, l.baseTerm
}

// trimTo trims the log up to base, a start a flush of the entries up to
// flushed persisted, and as the next commit would (the commits that went
// in during the flush could not trim its entries), then lets the
// write-ahead log remove the records up to base. The caller holds fmu.
func (s *boltShard) trimTo(base, flushed uint64) {
	s.lmu.Lock()
	if base > s.idx.base {
		s.idx.dropTo(base)
	}
	s.idx.trim(s.trimFloor.Load(), s.retain, s.retainBytes, flushed)
	s.lmu.Unlock()
	s.released.Store(base)
}

// trimUndo drops the undo records up to base, the new persisted log start.
func trimUndo(tx *bolt.Tx, m *shardMeta, base, baseTerm uint64) error {
	if base <= m.baseTxn {
		return nil
	}
	undoB := tx.Bucket(bucketUndo)
	for t := m.baseTxn + 1; t <= base; t++ {
		if err := undoB.Delete(u64Key(t)); err != nil {
			return err
		}
	}
	m.baseTxn, m.baseTerm = base, baseTerm
	return nil
}
