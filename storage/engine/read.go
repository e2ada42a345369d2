package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cairn-db/cairn/storage/lineproto"
	bolt "go.etcd.io/bbolt"
)

// Entries serves only published entries (up to LastTxnID): a group commit's
// entries are in the log a moment before, and a follower must never hold an
// entry this replica does not count yet.
func (s *boltShard) Entries(after uint64, limit int) ([]Entry, error) {
	if s.closed() {
		return nil, ErrClosed
	}
	out, err := s.readLog(after, s.LastTxnID(), limit)
	if err != nil {
		return nil, fmt.Errorf("engine: entries after %d: %w", after, err)
	}
	return out, nil
}

func (s *boltShard) TermAt(txnID uint64) (uint64, error) {
	if s.closed() {
		return 0, ErrClosed
	}
	last := s.LastTxnID()
	s.lmu.RLock()
	defer s.lmu.RUnlock()
	idxLast, _ := s.idx.last()
	last = min(last, idxLast) // a truncation cuts the index before it publishes
	switch {
	case txnID == 0:
		return 0, nil // before the first entry, whatever was trimmed
	case txnID > last:
		return 0, fmt.Errorf("engine: term at %d: %w: past the last entry %d", txnID, ErrNoEntry, last)
	case txnID < s.idx.base:
		return 0, fmt.Errorf("engine: term at %d: %w: log starts after %d", txnID, ErrCompacted, s.idx.base)
	}
	return s.idx.termAt(txnID), nil
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
	err := s.viewMems(func(tx *bolt.Tx, m *memtables) error {
		// See flush.go for why these memtables and this transaction agree.
		hideBlocks, hideFrozen := m.pending()
		hits, err := m.collect(metric, match, start, end, lim, hideFrozen)
		if err != nil {
			return err
		}
		flushed, err := flushedSeries(tx, metric, match)
		if err != nil {
			return err
		}
		ps, done, err := readSource(tx, start, end)
		if err != nil {
			return err
		}
		defer done()
		blocks := tx.Bucket(bucketBlocks)
		res := &strResolver{bucket: tx.Bucket(bucketStrs)}
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
			pts, err := readSeries(blocks, ps, res, fs.id, start, end, len(mem))
			if err != nil {
				return fmt.Errorf("series %q: %w", fs.key, err)
			}
			if len(hideBlocks) > 0 {
				r, err := hideBlocks.ranges(fs.key)
				if err != nil {
					return err
				}
				pts = hidePoints(pts, r)
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
