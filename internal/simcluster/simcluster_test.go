package simcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/internal/simcluster"
	"github.com/stretchr/testify/require"
)

// A small simulated cluster through the real path: every replica is placed
// and hosted, nothing is written to etcd while idle, and the shards led by
// the killed agent get new leaders.
func TestSimulateSmallCluster(t *testing.T) {
	res, err := simcluster.Run(context.Background(), simcluster.Params{Nodes: 4, Databases: 2, Shards: 4, Replicas: 3,
		Idle: 2 * time.Second, Kill: 1, RebalanceDelay: time.Second})
	require.NoError(t, err)
	require.Equal(t, 4, res.Nodes)
	require.Equal(t, 24, res.Replicas)
	require.Positive(t, res.PlaceMS)
	require.Less(t, res.IdleEtcdRevisionsPerS, 1.0, "an idle cluster writes nothing to etcd")
	require.Positive(t, res.FailoverShards, "the killed agent led shards")
	require.Positive(t, res.FailoverMS)
	require.Positive(t, res.RSSMiB)
}

func TestSimulateRefusesBadParams(t *testing.T) {
	for _, p := range []simcluster.Params{
		{Nodes: 0, Shards: 1, Replicas: 1},
		{Nodes: 3, Shards: 1, Replicas: 4},
		{Nodes: 3, Shards: 0, Replicas: 1},
		{Nodes: 3, Shards: 1, Replicas: 1, Kill: 3},
		{Nodes: 3, Shards: 1, Replicas: 1, LeaseTTL: time.Second},
	} {
		_, err := simcluster.Run(context.Background(), p)
		require.ErrorIs(t, err, simcluster.ErrInvalidParams, "%+v", p)
	}
}

// Replicas waiting for work hold no goroutine: a follower parked in its
// leader's fetch session is a member of the session, a leader between two
// in-sync upkeeps is a timer. With a goroutine per replica the idle process
// held more goroutines than replicas (plus etcd's, the master's, the
// sessions'); at 1,000 nodes their stacks were most of the memory.
func TestIdleReplicasHoldNoGoroutine(t *testing.T) {
	res, err := simcluster.Run(context.Background(), simcluster.Params{Nodes: 8, Databases: 24, Shards: 16, Replicas: 3,
		Idle: time.Second, RebalanceDelay: time.Second})
	require.NoError(t, err)
	require.Equal(t, 1152, res.Replicas)
	require.Less(t, res.Goroutines, res.Replicas/2, "goroutines at idle, with %d replicas hosted", res.Replicas)
}

// With --domains, the agents carry zone labels, the cluster places across
// them, and every shard of RF 2 spans both zones (5 agents: z0 has 3); with
// --kill-domain all of z0 dies and every shard it led is led from z1.
func TestSimulateDomains(t *testing.T) {
	res, err := simcluster.Run(context.Background(), simcluster.Params{Nodes: 5, Databases: 3, Shards: 8, Replicas: 2,
		Domains: 2, KillDomain: true, Idle: time.Second, RebalanceDelay: time.Second})
	require.NoError(t, err)
	require.Equal(t, &simcluster.MinMax{Min: 2, Max: 2}, res.DomainsPerShard)
	require.Positive(t, res.FailoverShards, "zone z0 led shards")
	require.Positive(t, res.FailoverMS)
	// The new leaders take writes once their in-sync sets are published
	// at their terms, after the master published them.
	require.GreaterOrEqual(t, res.FailoverWritableMS, res.FailoverMS)
	for _, p := range []simcluster.Params{
		{Nodes: 3, Shards: 1, Replicas: 1, Domains: 4},
		{Nodes: 3, Shards: 1, Replicas: 2, KillDomain: true},
		{Nodes: 3, Shards: 1, Replicas: 1, Domains: 2, KillDomain: true},
	} {
		_, err = simcluster.Run(context.Background(), p)
		require.ErrorIs(t, err, simcluster.ErrInvalidParams, "%+v", p)
	}
}
