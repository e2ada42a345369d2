package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

// TestFollowerFullSyncOfSealedShard: a follower that joins after its
// leader sealed time partitions and trimmed its log gets a full sync that
// carries the partition files: it answers every point, and holds the
// same partition files.
func TestFollowerFullSyncOfSealedShard(t *testing.T) {
	store, sm := memState(t)
	leaderDir := t.TempDir()
	eng, err := engine.NewBoltEngine(leaderDir, engine.WithRetainEntries(5), engine.WithFlushPoints(1))
	require.NoError(t, err)
	leader := startNodeWith(t, "L", sm, store, eng)
	twoReplicas(t, sm, store, leader, nil) // F is not live yet

	ctx := context.Background()
	hour := int64(time.Hour)
	require.Eventually(t, func() bool { return leader.host.Write(ctx, "d", 0, 1, manySeries(0)) == nil }, 5*time.Second, 10*time.Millisecond)
	for i := int64(1); i < 60; i++ {
		require.NoError(t, leader.host.Write(ctx, "d", 0, 1, manySeries(i*hour/10)))
	}
	ls, err := leader.eng.Open("d", 0)
	require.NoError(t, err)
	require.NoError(t, ls.(engine.FlushWaiter).WaitFlush())
	// Sealed here directly: the host seals only while every replica
	// advertises the protocol (TestHostGatesPartitions), and F is not up.
	ls.(engine.Sealer).SetPartitionLength(time.Hour)
	sealed, err := ls.(engine.Sealer).Seal(6 * hour)
	require.NoError(t, err)
	require.Equal(t, 5, sealed)
	want, err := ls.Query("cpu", nil, 0, 6*hour)
	require.NoError(t, err)
	_, err = ls.Entries(0, 1)
	require.ErrorIs(t, err, engine.ErrCompacted, "the leader trimmed its log")

	followerDir := t.TempDir()
	feng, err := engine.NewBoltEngine(followerDir)
	require.NoError(t, err)
	follower := startNodeWith(t, "F", sm, store, feng)
	live(t, store, "/t/storage/default", "F", follower.addr())
	require.Eventually(t, func() bool { return len(isrOf(t, store, 0)) == 2 }, 10*time.Second, 20*time.Millisecond)
	fs, err := follower.eng.Open("d", 0)
	require.NoError(t, err)
	got, err := fs.Query("cpu", nil, 0, 6*hour)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, partNames(t, leaderDir), partNames(t, followerDir), "the same partition files")
	require.Len(t, partNames(t, followerDir), 5)
}

// partNames lists the sealed partition files under an engine's dir.
func partNames(t *testing.T, dir string) []string {
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".db.p") {
			out = append(out, d.Name())
		}
		return err
	}))
	return out
}
