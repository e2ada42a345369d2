package storage

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

const hourNs = int64(3600e9)

// countingExpirer counts the blocks its shard deleted, which the test's
// disk usage follows.
type countingExpirer struct {
	engine.Expirer
	dropped *int
}

func (c countingExpirer) ExpireBefore(cutoff int64) (int, int64, error) {
	n, b, err := c.Expirer.ExpireBefore(cutoff)
	*c.dropped += n
	return n, b, err
}

// hoursShard opens shard id of a fresh engine holding one block per hour
// for hours 0..hours-1 (when perHour) or one block over all of them.
func hoursShard(t *testing.T, e engine.Engine, id, hours int, perHour bool) engine.Shard {
	t.Helper()
	s, err := e.Open("db", id)
	require.NoError(t, err)
	var pts []lineproto.Point
	for h := range hours {
		for i := range 10 {
			pts = append(pts, lineproto.Point{Metric: "m", Field: "v", TS: int64(h)*hourNs + int64(i)*60e9, Value: float64(h)})
		}
		if perHour || h == hours-1 {
			require.NoError(t, s.Apply(engine.Entry{TxnID: s.LastTxnID() + 1, Term: 1, Points: pts}))
			pts = nil
			// The next commit freezes the memtable (flush points 1); its
			// flush makes the block.
			require.NoError(t, s.Apply(engine.Entry{TxnID: s.LastTxnID() + 1, Term: 1, Points: []lineproto.Point{{Metric: "other", Field: "v", TS: 1 << 62}}}))
			require.NoError(t, s.(engine.FlushWaiter).WaitFlush())
		}
	}
	return s
}

func firstPoint(t *testing.T, s engine.Shard) int64 {
	t.Helper()
	got, err := s.Query("m", nil, 0, 1<<62)
	require.NoError(t, err)
	require.NotEmpty(t, got)
	return got[0].Points[0].TS
}

// TestRelieveDeletesTheOldestHoursFirst: two shards of six hourly blocks;
// a disk at 80 % that frees 5 points per block deleted, under a limit of
// 62 %: the oldest hour of both shards goes, then the next, and nothing
// more once under; a disk under the limit deletes nothing.
func TestRelieveDeletesTheOldestHoursFirst(t *testing.T) {
	e, err := engine.NewBoltEngine(t.TempDir(), engine.WithFlushPoints(1), engine.WithFlushInterval(0), engine.WithCompactRate(0))
	require.NoError(t, err)
	defer e.Close()
	dropped := 0
	var shards []engine.Expirer
	var raw []engine.Shard
	for id := range 2 {
		s := hoursShard(t, e, id, 6, true)
		raw = append(raw, s)
		shards = append(shards, countingExpirer{s.(engine.Expirer), &dropped})
	}
	usage := func() int { return 80 - 5*dropped }

	blocks, before, err := relieve(shards, usage, 62)
	require.NoError(t, err)
	require.Equal(t, 4, blocks, "hours 0 and 1 of both shards")
	require.Equal(t, 2*hourNs, before)
	require.Equal(t, 60, usage())
	for _, s := range raw {
		require.Equal(t, 2*hourNs, firstPoint(t, s), "hours 2-5 are all there")
	}

	blocks, before, err = relieve(shards, usage, 62)
	require.NoError(t, err)
	require.Zero(t, blocks, "under the limit: nothing")
	require.Zero(t, before)
}

// TestRelieveWidensPastLongBlocks: a block spanning six hours is deleted
// too: the rounds that delete nothing double their span until it covers
// the block; a limit that cannot be met stops once no block is left.
func TestRelieveWidensPastLongBlocks(t *testing.T) {
	e, err := engine.NewBoltEngine(t.TempDir(), engine.WithFlushPoints(1), engine.WithFlushInterval(0), engine.WithCompactRate(0))
	require.NoError(t, err)
	defer e.Close()
	s := hoursShard(t, e, 0, 6, false)
	blocks, before, err := relieve([]engine.Expirer{s.(engine.Expirer)}, func() int { return 99 }, 50)
	require.NoError(t, err)
	require.Equal(t, 1, blocks, "the one block (the other point is in the memtable)")
	require.Equal(t, 8*hourNs, before, "spans of 1, 2, 4 h deleted nothing; 8 h did")
	got, err := s.Query("m", nil, 0, 1<<62)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestRelieveDropsOldestSealedPartitionsFirst: a shard whose hours 0-4 are
// sealed partitions; a disk whose usage follows its partition files: the
// oldest partitions go, whole, one a round, until under the limit.
func TestRelieveDropsOldestSealedPartitionsFirst(t *testing.T) {
	dir := t.TempDir()
	e, err := engine.NewBoltEngine(dir, engine.WithFlushPoints(1), engine.WithFlushInterval(0), engine.WithCompactRate(0))
	require.NoError(t, err)
	defer e.Close()
	s := hoursShard(t, e, 0, 6, true)
	s.(engine.Sealer).SetPartitionLength(time.Hour)
	sealed, err := s.(engine.Sealer).Seal(6 * hourNs)
	require.NoError(t, err)
	require.Equal(t, 5, sealed)
	files := func() int {
		m, err := filepath.Glob(filepath.Join(dir, "*", "*.db.p*"))
		require.NoError(t, err)
		return len(m)
	}
	require.Equal(t, 5, files())
	usage := func() int { return 40 + 5*files() }

	blocks, before, err := relieve([]engine.Expirer{s.(engine.Expirer)}, usage, 52)
	require.NoError(t, err)
	require.Equal(t, 3, blocks, "the partitions of hours 0, 1 and 2, a block each")
	require.Equal(t, 3*hourNs, before)
	require.Equal(t, 2, files())
	require.Equal(t, 3*hourNs, firstPoint(t, s), "hours 3-5 are all there")
}
