package storage_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

// startNodeIn runs a host whose engine files and seen terms live in dir, and
// returns a stop function (the test restarts it on the same dir).
func startNodeIn(t *testing.T, id, dir string, sm *statemachine.Manager, store kv.Store) (*node, func()) {
	eng, err := engine.NewBoltEngine(dir)
	require.NoError(t, err)
	return runNode(t, id, dir, sm, store, eng)
}

// oneShard publishes database d (uid u1), one shard with replicas, led by
// leader at term.
func oneShard(sm *statemachine.Manager, nodes map[string]string, replicas []string, leader string, term int64) {
	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	for id, addr := range nodes {
		put(sm, statemachine.ClusterNodesSource("default"), statemachine.KindStorageNodes, "default", id,
			models.StorageNode{NodeID: id, NodeAddress: addr})
	}
	put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "d",
		models.Database{Name: "d", StorageCluster: "default", NumShards: 1, ReplicaFactor: len(replicas), UID: "u1"})
	put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", "d",
		models.Assignment{DB: "d", Cluster: "default", Shards: []models.ShardAssignment{{ID: 0, Replicas: replicas}}})
	setLeader(sm, leader, term)
}

func setLeader(sm *statemachine.Manager, leader string, term int64) {
	setLeaderOf(sm, "u1", leader, term)
}

// setLeaderOf publishes d/0's leader as the master writes it for incarnation uid.
func setLeaderOf(sm *statemachine.Manager, uid, leader string, term int64) {
	put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", "d",
		models.ShardStates{DB: "d", UID: uid, Shards: []models.ShardState{{ID: 0, Leader: leader, Term: term, Status: models.StatusOnline}}})
}

// askSeen asks the node's failover endpoint what it knows of shard d/0.
func askSeen(t *testing.T, n *node) models.ReplicaTxn {
	t.Helper()
	ans, err := client.New(http.DefaultClient).Txn(context.Background(), n.peer(), "d", []int{0})
	require.NoError(t, err)
	return ans[0]
}

// A replica records the highest term it accepted on disk before acting at
// it, reports it (node record's seen_term, the failover answer), and refuses
// to lead at a lower term even after a restart: a state rolled back to an
// older term (a restored etcd) cannot make it reuse a term. A leadership
// that wrote nothing is remembered all the same.
func TestSeenTermPersistedAndLowerTermsRefused(t *testing.T) {
	store, sm := memState(t)
	dir := t.TempDir()
	ctx := context.Background()

	n, stop := startNodeIn(t, "L", dir, sm, store)
	oneShard(sm, map[string]string{"L": n.addr()}, []string{"L"}, "L", 3)
	require.Eventually(t, func() bool { return n.host.Write(ctx, "d", 0, 3, points(0, 5)) == nil }, 5*time.Second, 10*time.Millisecond)
	// Term 4 is published and accepted; nothing is written at it.
	setLeader(sm, "L", 4)
	// The seen term is on disk before the replica acts at it: the answer's
	// term follows a moment later.
	want := models.ReplicaTxn{LastTxnID: 1, LastTerm: 3, Term: 4, SeenTerm: 4}
	require.Eventually(t, func() bool { return askSeen(t, n) == want }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, map[string]int64{"d/0": 4}, n.host.SeenTerms())

	// The state rolls back to term 3: the replica does not lead at it.
	setLeader(sm, "L", 3)
	require.Eventually(t, func() bool {
		return errors.Is(n.host.Write(ctx, "d", 0, 3, points(10, 1)), storage.ErrTermBehind)
	}, 5*time.Second, 10*time.Millisecond, "a write at a term below the seen one is refused with ErrTermBehind")
	require.ErrorIs(t, n.host.Write(ctx, "d", 0, 3, points(10, 1)), models.ErrStaleTerm)

	// Restarted on the same dir with the rolled-back state: still refused,
	// and the record reports the term seen before the restart.
	stop()
	raw, err := os.ReadFile(filepath.Join(dir, "d.terms"))
	require.NoError(t, err)
	require.JSONEq(t, `{"uid":"u1","terms":{"0":4}}`, string(raw))
	n, _ = startNodeIn(t, "L", dir, sm, store)
	put(sm, statemachine.ClusterNodesSource("default"), statemachine.KindStorageNodes, "default", "L",
		models.StorageNode{NodeID: "L", NodeAddress: n.addr()})
	require.Eventually(t, func() bool { return n.host.SeenTerms()["d/0"] == 4 }, 5*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, n.host.Write(ctx, "d", 0, 3, points(10, 1)), storage.ErrTermBehind)
	require.Equal(t, int64(4), askSeen(t, n).SeenTerm)

	// Published above the seen term: it leads again, and remembers it.
	setLeader(sm, "L", 5)
	require.Eventually(t, func() bool { return n.host.Write(ctx, "d", 0, 5, points(20, 5)) == nil }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, map[string]int64{"d/0": 5}, n.host.SeenTerms())

	// A database dropped and created again under the same name starts its
	// terms over: the old incarnation's seen terms do not refuse term 1.
	// The new config arrives first, while the old incarnation's states
	// (term 5) are still held, as a watcher may deliver them: the replica
	// still open from the old incarnation is dropped with its data, and the
	// old states give the new one no role and raise none of its terms.
	put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", "d",
		models.Database{Name: "d", StorageCluster: "default", NumShards: 1, ReplicaFactor: 1, UID: "u2"})
	require.Eventually(t, func() bool {
		ans, err := client.New(http.DefaultClient).Txn(ctx, n.peer(), "d", []int{0})
		return err == nil && ans[0].LastTxnID == 0 && n.host.SeenTerms()["d/0"] == 0 &&
			errors.Is(n.host.Write(ctx, "d", 0, 5, points(30, 1)), models.ErrStaleTerm)
	}, 5*time.Second, 10*time.Millisecond, "the old incarnation's replica and entries dropped, a new one open")
	require.Equal(t, models.ReplicaTxn{}, askSeen(t, n), "no term of the old states accepted for the new incarnation")

	// The drop deleted the old in-sync record (term 5) too.
	_, err = store.Delete(ctx, models.ClusterKeys{SNS: "/t/storage/default"}.ISR("d", 0))
	require.NoError(t, err)
	setLeaderOf(sm, "u2", "L", 1)
	require.Eventually(t, func() bool { return n.host.SeenTerms()["d/0"] == 1 }, 5*time.Second, 10*time.Millisecond,
		"term 1 of the new incarnation accepted")
	raw, err = os.ReadFile(filepath.Join(dir, "d.terms"))
	require.NoError(t, err)
	require.JSONEq(t, `{"uid":"u2","terms":{"0":1}}`, string(raw))
	require.Eventually(t, func() bool { return n.host.Write(ctx, "d", 0, 1, points(40, 2)) == nil }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, models.ReplicaTxn{LastTxnID: 1, LastTerm: 1, Term: 1, SeenTerm: 1}, askSeen(t, n))
}

// A leader that a follower's fetch tells of a newer term of its shard stops
// acknowledging writes at once (ErrSuperseded), until its own term changes.
func TestLeaderFencedByNewerTermFromPeer(t *testing.T) {
	store, sm := memState(t)
	ctx := context.Background()

	n, _ := startNodeIn(t, "L", t.TempDir(), sm, store)
	oneShard(sm, map[string]string{"L": n.addr()}, []string{"L"}, "L", 2)
	require.Eventually(t, func() bool { return n.host.Write(ctx, "d", 0, 2, points(0, 5)) == nil }, 5*time.Second, 10*time.Millisecond)

	// A peer fetches at term 3: a leadership this node has not seen yet.
	resp, err := http.Get(fmt.Sprintf("http://%s/internal/v1/shards/d/0/log?term=3&node=F&after=0&after_term=0&wait_ms=0", n.addr()))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	err = n.host.Write(ctx, "d", 0, 2, points(10, 1))
	require.ErrorIs(t, err, storage.ErrSuperseded)
	require.ErrorIs(t, err, models.ErrStaleTerm)

	// Its term changes: it leads again.
	setLeader(sm, "L", 3)
	require.Eventually(t, func() bool { return n.host.Write(ctx, "d", 0, 3, points(20, 1)) == nil }, 5*time.Second, 10*time.Millisecond)
}

// A seen-term file that does not decode (the data dir is untrusted) keeps the
// database's replicas idle rather than risk reusing a term; once it is fixed
// (here removed), the replica serves.
func TestUnreadableSeenTermFileKeepsReplicaIdle(t *testing.T) {
	store, sm := memState(t)
	dir := t.TempDir()
	ctx := context.Background()
	bad := filepath.Join(dir, "d.terms")
	require.NoError(t, os.WriteFile(bad, []byte(`{"uid":"u1","terms":{"0":"seven"}`), 0o644))

	n, _ := startNodeIn(t, "L", dir, sm, store)
	oneShard(sm, map[string]string{"L": n.addr()}, []string{"L"}, "L", 1)
	require.Eventually(t, func() bool { return n.host.Hosted() == 1 }, 5*time.Second, 10*time.Millisecond)
	// Through full reconcile passes (one a second) it never leads.
	require.Never(t, func() bool { return n.host.Write(ctx, "d", 0, 1, points(0, 1)) == nil }, 2500*time.Millisecond, 100*time.Millisecond)
	require.ErrorIs(t, n.host.Write(ctx, "d", 0, 1, points(0, 1)), storage.ErrStaleTerm, "idle: not leading")
	require.Empty(t, n.host.SeenTerms())

	require.NoError(t, os.Remove(bad))
	require.Eventually(t, func() bool { return n.host.Write(ctx, "d", 0, 1, points(0, 1)) == nil }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, map[string]int64{"d/0": 1}, n.host.SeenTerms())
}
