package engine

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cairn-db/cairn/storage/lineproto"
	bolt "go.etcd.io/bbolt"
)

// Entries serves only published entries (up to LastTxnID): a group commit's
// entries are in the log a moment before, and a follower must never hold an
// entry this replica does not count yet.
func (s *boltShard) Entries(after uint64, limit int) ([]Entry, error) {
	var out []Entry
	upto := s.LastTxnID()
	err := s.view(func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil {
			return err
		}
		if after < m.baseTxn {
			return fmt.Errorf("%w: asked after %d, log starts after %d", ErrCompacted, after, m.baseTxn)
		}
		c := tx.Bucket(bucketLog).Cursor()
		for k, v := c.Seek(u64Key(after + 1)); k != nil && beUint64(k) <= upto; k, v = c.Next() {
			if limit > 0 && len(out) >= limit {
				break
			}
			var e Entry
			if err := e.UnmarshalBinary(v); err != nil {
				return fmt.Errorf("log txn %d: %w", beUint64(k), err)
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("engine: entries after %d: %w", after, err)
	}
	return out, nil
}

func (s *boltShard) TermAt(txnID uint64) (uint64, error) {
	var term uint64
	err := s.view(func(tx *bolt.Tx) error {
		m, err := readMeta(tx)
		if err != nil {
			return err
		}
		switch {
		case txnID == 0:
			return nil // before the first entry, whatever was trimmed
		case txnID > m.lastTxn:
			return fmt.Errorf("%w: %d is past the last entry %d", ErrNoEntry, txnID, m.lastTxn)
		case txnID == m.baseTxn:
			term = m.baseTerm
			return nil
		case txnID < m.baseTxn:
			return fmt.Errorf("%w: %d, log starts after %d", ErrCompacted, txnID, m.baseTxn)
		}
		_, term, err = entryHeader(tx.Bucket(bucketLog).Get(u64Key(txnID)))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("engine: term at %d: %w", txnID, err)
	}
	return term, nil
}

// Query finds the flushed series of metric through the posting lists (those
// of one matched tag when there is one), reads only their blocks that overlap
// [start, end], and merges in the memtable's points, which are newer and win
// on the same ts. Results are sorted by series key.
func (s *boltShard) Query(metric string, match map[string]string, start, end int64) ([]Series, error) {
	return s.QueryLimited(metric, match, start, end, Limits{})
}

// QueryLimited is Query with limits: the answer is counted as it is read,
// and the read stops at the first series or point over a limit.
func (s *boltShard) QueryLimited(metric string, match map[string]string, start, end int64, lim Limits) ([]Series, error) {
	var out []Series
	b := budget{lim: lim}
	emit := func(sr Series) error {
		out = append(out, sr)
		return b.add(len(sr.Points))
	}
	if start > end {
		return out, nil
	}
	err := s.view(func(tx *bolt.Tx) error {
		// s.mem is stable while view holds mu; see flushLocked for why this
		// memtable and this transaction agree.
		hits, err := s.mem.collect(metric, match, start, end, lim)
		if err != nil {
			return err
		}
		flushed, err := flushedSeries(tx, metric, match)
		if err != nil {
			return err
		}
		blocks := tx.Bucket(bucketBlocks)
		for _, fs := range flushed {
			for len(hits) > 0 && hits[0].key < fs.key {
				if err := emit(hits[0].series()); err != nil {
					return err
				}
				hits = hits[1:]
			}
			var mem []SeriesPoint
			var sr Series
			if len(hits) > 0 && hits[0].key == fs.key {
				sr, mem = hits[0].header, hits[0].points
				hits = hits[1:]
			} else {
				var ok bool
				if sr, ok, err = matchSeries(fs.key, match); err != nil {
					return err
				} else if !ok {
					continue
				}
			}
			pts, err := readSeries(blocks, fs.id, start, end, len(mem))
			if err != nil {
				return fmt.Errorf("series %q: %w", fs.key, err)
			}
			if room := b.room(); room >= 0 && len(pts) > room {
				return b.overPoints() // one series alone is over: stop before merging it
			}
			sr.Points = mergePoints(pts, mem)
			if len(sr.Points) > 0 {
				if err := emit(sr); err != nil {
					return err
				}
			}
		}
		for _, h := range hits {
			if err := emit(h.series()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("engine: query %q: %w", metric, err)
	}
	return out, nil
}

type flushedRef struct {
	id  uint64
	key string
}

// flushedSeries lists the flushed series of metric that may match, by key.
func flushedSeries(tx *bolt.Tx, metric string, match map[string]string) ([]flushedRef, error) {
	prefix := postingPrefix(postMetric, metric)
	for k, v := range match {
		if k == FieldTag {
			prefix = postingPrefix(postField, metric, v)
		} else {
			prefix = postingPrefix(postTag, metric, k, v)
			break
		}
	}
	skey := tx.Bucket(bucketSKey)
	ids, err := decodePostings(tx.Bucket(bucketPost).Get(prefix))
	if err != nil {
		return nil, err
	}
	out := make([]flushedRef, 0, len(ids))
	for _, id := range ids {
		key := skey.Get(u64Key(id))
		if key == nil {
			return nil, fmt.Errorf("%w: posting for unknown series %d", ErrCorrupt, id)
		}
		out = append(out, flushedRef{id, string(key)})
	}
	slices.SortFunc(out, func(a, b flushedRef) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

func (h memHit) series() Series {
	sr := h.header
	sr.Points = h.points
	return sr
}

// matchSeries parses a series key into a result header (no points) and says
// whether its tags contain all of match.
func matchSeries(key string, match map[string]string) (Series, bool, error) {
	metric, tags, field, err := lineproto.ParseSeriesKey(key)
	if err != nil {
		return Series{}, false, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	sr := Series{Metric: metric, Tags: make(map[string]string, len(tags)+1)}
	for _, t := range tags {
		sr.Tags[t.Key] = t.Value
	}
	if field != DefaultField {
		sr.Tags[FieldTag] = field
	}
	for k, v := range match {
		if k == FieldTag {
			if v != field {
				return Series{}, false, nil
			}
			continue
		}
		if got, ok := sr.Tags[k]; !ok || got != v {
			return Series{}, false, nil
		}
	}
	return sr, true, nil
}

// Snapshot copies the file as of one read transaction. It needs no flush: the
// memtable is derived from the log tail past flushed_txn, which the copy
// carries, and Restore replays it.
func (s *boltShard) Snapshot(w io.Writer) error {
	err := s.view(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(w)
		return err
	})
	if err != nil {
		return fmt.Errorf("engine: snapshot: %w", err)
	}
	return nil
}

// Restore stages the snapshot next to the shard file, checks it opens as a
// shard, then swaps it in with a rename so a crash leaves either the old or the
// new content, never a mix.
func (s *boltShard) Restore(r io.Reader) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tmp := s.path + ".restore"
	defer os.Remove(tmp)
	if err := writeFileSync(tmp, r); err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}
	if err := checkSnapshot(tmp); err != nil {
		return fmt.Errorf("engine: restore: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return ErrClosed
	}
	if err := s.replaceFile(tmp, "restore"); err != nil {
		return err
	}
	// The snapshot's unflushed tail is in its log: replay it into a new memtable.
	err := s.recover()
	s.resyncQueueLocked(fmt.Errorf("%w: shard restored from a snapshot", ErrTxnGap))
	return err
}

func writeFileSync(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func checkSnapshot(path string) error {
	opts := boltOptions()
	opts.ReadOnly = true
	db, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSnapshot, err)
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		// Snapshots of older versions have no block buckets; opening adds
		// them and converts the points.
		for _, name := range [][]byte{bucketMeta, bucketLog, bucketUndo} {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("%w: bucket %q missing", ErrBadSnapshot, name)
			}
		}
		// The unflushed tail must replay, or the swapped-in shard could not
		// build its memtable.
		m, err := readMeta(tx)
		var ix *seriesIndex
		if err == nil {
			ix, err = loadIndex(tx)
		}
		if err == nil {
			_, err = replay(tx, ix, m.flushedTxn, m.lastTxn, time.Now())
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadSnapshot, err)
		}
		return nil
	})
}
