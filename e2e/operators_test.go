package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// opView is one operator of GET /api/v1/operators.
type opView struct {
	DB         string   `json:"db"`
	Shard      int      `json:"shard"`
	Kind       string   `json:"kind"`
	From       []string `json:"from"`
	To         []string `json:"to"`
	Leader     string   `json:"leader"`
	Step       string   `json:"step"`
	MasterTerm int64    `json:"master_term"`
}

func operatorsOf(p *Proc) ([]opView, bool) {
	var out struct {
		Operators []opView `json:"operators"`
	}
	if getDataJSON(p, "/api/v1/operators", &out) != 200 {
		return nil, false
	}
	return out.Operators, true
}

// assignHistory records every version of one database's assignment in etcd,
// from the moment it is created (a watch from revision 1 sees them all).
type assignHistory struct {
	mu       sync.Mutex
	versions []map[int][]string // shard -> replicas
	err      error
}

func watchAssignments(t *testing.T, endpoint, db string) *assignHistory {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	h := &assignHistory{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range cli.Watch(ctx, "/cairn/database/assign/"+db, clientv3.WithRev(1)) {
			if resp.Err() != nil {
				h.mu.Lock()
				h.err = resp.Err()
				h.mu.Unlock()
				return
			}
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				var a struct {
					Shards []struct {
						ID       int      `json:"id"`
						Replicas []string `json:"replicas"`
					} `json:"shards"`
				}
				v := map[int][]string{}
				if err := json.Unmarshal(ev.Kv.Value, &a); err == nil {
					for _, s := range a.Shards {
						v[s.ID] = s.Replicas
					}
				}
				h.mu.Lock()
				h.versions = append(h.versions, v)
				h.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cli.Close()
	})
	return h
}

func (h *assignHistory) snapshot() ([]map[int][]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.versions), h.err
}

// TestMasterKilledMidRebalance: two master candidates; a storage node joins a
// cluster holding a database of many shards, and once the master has
// persisted its operators (and started carrying them out) the process
// running the master role is killed with -9. The other candidate takes the
// term, resumes the persisted operators, and the cluster ends at exactly the
// placement they planned, balanced; no version of the assignment ever held a
// shard with fewer replicas than its replica factor.
func TestMasterKilledMidRebalance(t *testing.T) {
	t.Setenv("CAIRN_REBALANCE_DELAY", "1s") // every process started below inherits it
	const shards, rf = 96, 2
	e := startEtcd(t)
	e.waitStatus("/api/v1/health", 200, 15*time.Second)
	m1 := startNode(t, "master,broker", e.clientURL)
	m2 := startNode(t, "master,broker", e.clientURL)
	obs := startNode(t, "broker", e.clientURL) // reads only; never master
	for _, p := range []*Proc{m1, m2, obs} {
		nodeID(t, p)
	}
	require.Eventually(t, func() bool {
		code, _ := obs.post("/api/v1/storage-clusters", map[string]any{"name": "default"})
		return code == 201 || code == 409
	}, 15*time.Second, 50*time.Millisecond, "storage cluster never created")
	var storage []*Proc
	for range 3 {
		storage = append(storage, startNode(t, "storage", e.clientURL))
	}
	c := &dataCluster{t: t, broker: obs, etcd: e.Proc, storage: storage, db: "db", rf: rf, shards: shards}
	for _, s := range storage {
		c.ids = append(c.ids, nodeID(t, s))
	}
	// Every node live in the masters' own state too (a master+broker process
	// has one state): a master that placed the database while one node's
	// record had not reached it yet would move that node's share to it in
	// the rebalance below, a move not to the new node.
	require.Eventually(t, func() bool {
		for _, p := range []*Proc{obs, m1, m2} {
			var nodes struct {
				Storage map[string][]struct {
					NodeID string `json:"node_id"`
				} `json:"storage"`
			}
			if getDataJSON(p, "/api/v1/nodes", &nodes) != 200 || len(nodes.Storage["default"]) != len(storage) {
				return false
			}
		}
		return true
	}, 15*time.Second, 20*time.Millisecond, "storage nodes never all live")
	hist := watchAssignments(t, e.clientURL, "db")
	code, body := obs.post("/api/v1/databases", map[string]any{"name": "db", "num_shards": shards, "replica_factor": rf})
	require.Equal(t, 201, code, "create database: %v", body)
	c.waitHealthy(60 * time.Second)

	// The fourth node joins: after the rebalance delay the master plans,
	// persists its operators and starts them.
	joined := startNode(t, "storage", e.clientURL)
	joinedID := nodeID(t, joined)
	c.storage, c.ids = append(c.storage, joined), append(c.ids, joinedID)
	var planned []opView
	require.Eventually(t, func() bool {
		ops, ok := operatorsOf(obs)
		if ok && len(ops) > 0 {
			planned = ops
			return true
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "the master never persisted operators for the new node")
	// Kill once the master has carried some steps out, but not all.
	var atKill []opView
	require.Eventually(t, func() bool {
		ops, ok := operatorsOf(obs)
		if !ok {
			return false
		}
		require.NotEmpty(t, ops, "the rebalance finished before the kill; nothing to resume")
		atKill = ops
		if len(ops) < len(planned) {
			return true
		}
		for _, o := range ops {
			if o.Step != "add-replicas" {
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "the master never made progress")
	var old, next *Proc
	switch {
	case isMaster(m1):
		old, next = m1, m2
	case isMaster(m2):
		old, next = m2, m1
	default:
		t.Fatal("no master among the candidates")
	}
	old.kill9()
	killed := time.Now()
	oldTerm := planned[0].MasterTerm
	moves := 0
	for _, o := range planned {
		require.Equal(t, "db", o.DB)
		if o.Kind == "move" {
			moves++
			require.Contains(t, o.To, joinedID, "every move goes to the new node: %+v", o)
		}
	}
	require.Positive(t, moves)
	// Still in flight when the master died: the new one has work to resume.
	left, ok := operatorsOf(obs)
	require.True(t, ok)
	require.NotEmpty(t, left, "the rebalance finished before the kill; nothing to resume")
	steps := map[string]int{}
	for _, o := range atKill {
		steps[o.Step]++
	}
	t.Logf("killed the master with %d of %d operators (%d moves) in flight, next steps %v", len(left), len(planned), moves, steps)

	require.Eventually(t, func() bool { return isMaster(next) }, 15*time.Second, 20*time.Millisecond, "no new master")
	require.Eventually(t, func() bool {
		ops, ok := operatorsOf(obs)
		return ok && len(ops) == 0 && c.healthy()
	}, 90*time.Second, 50*time.Millisecond, "the new master never finished the operators")
	t.Logf("kill -9 of the master to rebalance done: %s", time.Since(killed).Round(time.Millisecond))

	// The same placement as planned: every planned move ended at its target.
	final := map[int][]string{}
	for _, s := range c.shardsOf() {
		final[s.ID] = s.Replicas
	}
	for _, o := range planned {
		if o.Kind == "move" {
			require.ElementsMatch(t, o.To, final[o.Shard], "shard %d did not end where it was planned", o.Shard)
		}
	}
	perNode := map[string]int{}
	for _, id := range c.ids {
		perNode[id] = 0
	}
	for _, reps := range final {
		for _, n := range reps {
			perNode[n]++
		}
	}
	vals := slices.Collect(maps.Values(perNode))
	require.LessOrEqual(t, slices.Max(vals)-slices.Min(vals), 1, "not balanced: %v", perNode)

	// The new master resumed the old term's operators rather than planning
	// anew.
	logb, err := os.ReadFile(next.log)
	require.NoError(t, err)
	require.Contains(t, string(logb), "resuming operators of an earlier term")

	// No version of the assignment ever dropped a shard below the factor.
	versions, err := hist.snapshot()
	require.NoError(t, err)
	require.Greater(t, len(versions), 2)
	for i, v := range versions {
		for id, reps := range v {
			require.GreaterOrEqual(t, len(reps), rf, "assignment version %d: shard %d has replicas %v", i, id, reps)
		}
	}
	t.Logf("%d assignment versions checked; master term of the plan %d; placement %v", len(versions), oldTerm, perNode)
}
