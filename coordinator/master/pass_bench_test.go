package master

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// BenchmarkPassAfterNodeReport is the master's reconcile pass woken by one
// storage node's record write that changes nothing a decision reads (a
// report of what it follows), at 999 nodes x 1,000 databases x 32 shards x
// RF 3, everything placed and led: what each of the ~5,000 record writes of
// a placement at 1,000 nodes costs the master beyond its own databases.
func BenchmarkPassAfterNodeReport(b *testing.B) {
	const c, nodes, dbs, shards = "c", 999, 1000, 32
	st := domainState(nodes, dbs, shards, false, 0)
	cfgs, revs := map[string]models.Database{}, map[string]int64{}
	for name := range st.Assignments.All() {
		cfgs[name] = models.Database{Name: name, StorageCluster: c, NumShards: shards, ReplicaFactor: 3}
		revs[name] = 1
	}
	st.Databases = statemachine.MapOf(cfgs)
	st.StorageClusters = map[string]models.StorageCluster{c: {Name: c}}
	st.ModRevs = map[string]statemachine.Map[int64]{}
	for _, src := range []string{statemachine.SourceDatabaseConfig, statemachine.SourceAssign, statemachine.SourceShardState} {
		st.ModRevs[src] = statemachine.MapOf(revs)
	}
	st.Invalid = map[string]map[string]string{}
	for _, src := range []string{statemachine.SourceStorageConfig, statemachine.SourceDatabaseConfig,
		statemachine.SourceAssign, statemachine.SourceShardState, statemachine.SourceDrain} {
		st.Synced[src] = true
		st.Revisions[src] = 1
	}
	nodesSrc := statemachine.ClusterNodesSource(c)
	st.Revisions[nodesSrc] = 1
	cur := st
	store := kv.NewMemoryStore()
	keys := models.Keys{NS: "/bench"}
	m := New(Config{Store: store, Keys: keys, Election: kv.NewElection(store, keys.Master()), Term: 1,
		State: func() *statemachine.State { return cur }, RebalanceDelay: time.Hour, Resync: time.Hour})
	ctx := context.Background()
	if err := m.reconcile(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		next := *cur
		next.Revisions = maps.Clone(cur.Revisions)
		next.Revisions[nodesSrc]++
		id := fmt.Sprintf("n%04d", i%nodes)
		rec := next.Nodes.At(c).At(id)
		rec.Following = map[string]string{fmt.Sprintf("x/%d", i): "n0000"}
		next.Nodes = statemachine.SetIn(next.Nodes, c, id, rec)
		cur = &next
		if err := m.reconcile(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
