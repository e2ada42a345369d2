package master

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// The operator types live in models (the API shows them); master names
// them as its own.
type (
	OpKind   = models.OpKind
	Step     = models.Step
	Operator = models.Operator
)

// Operator kinds and steps (see models).
const (
	OpMove     = models.OpMove
	OpLeader   = models.OpLeader
	OpFailover = models.OpFailover
	OpOffline  = models.OpOffline

	StepAdd         = models.StepAdd
	StepWaitSync    = models.StepWaitSync
	StepLeaveLeader = models.StepLeaveLeader
	StepRemove      = models.StepRemove
	StepLeader      = models.StepLeader
	StepPublish     = models.StepPublish
	StepDone        = models.StepDone
	StepCancel      = models.StepCancel
)

func keyOf(o Operator) shardKey { return shardKey{o.DB, o.Shard} }

// shardKey names one shard; operators are keyed by it (one per shard).
type shardKey struct {
	DB    string
	Shard int
}

func compareOps(a, b Operator) int {
	if c := cmp.Compare(a.DB, b.DB); c != 0 {
		return c
	}
	return cmp.Compare(a.Shard, b.Shard)
}

// NextStep derives, from the state alone, the step an operator needs next.
// Progress is read from the assignment, the shard state and the in-sync set,
// never from memory, so a new master resumes exactly where the old one was.
func NextStep(o Operator, st *statemachine.State) Step {
	a, ok := st.Assignments.Get(o.DB)
	if !ok || o.Shard < 0 || o.Shard >= len(a.Shards) {
		return StepCancel
	}
	if _, exists := st.Databases.Get(o.DB); !exists {
		return StepCancel
	}
	cur := a.Shards[o.Shard].Replicas
	s, _ := st.ShardState(o.DB, o.Shard)
	switch o.Kind {
	case OpFailover, OpOffline:
		return StepPublish
	case OpLeader:
		return leaderStep(o, st, a, s)
	}
	if !subset(o.To, cur) {
		for _, n := range minus(o.To, cur) {
			if _, live := st.Nodes.At(a.Cluster).Get(n); !live {
				return StepCancel // the target died before it got the replica
			}
		}
		return StepAdd
	}
	if !sameSet(cur, o.To) {
		if !shardInSync(st, a.Cluster, o.DB, o.Shard, o.To) {
			for _, n := range o.To {
				if _, live := st.Nodes.At(a.Cluster).Get(n); !live {
					return StepCancel // it will never catch up
				}
			}
			return StepWaitSync
		}
		if s.Status == models.StatusOnline && !slices.Contains(o.To, s.Leader) {
			return StepLeaveLeader
		}
		return StepRemove
	}
	return leaderStep(o, st, a, s)
}

// leaderStep: the final handover to the planned leader, only to a live,
// non-draining replica in the in-sync set of an online shard; otherwise the
// target is dropped (the leader spreading that follows balances leaders
// anyway). An unclean transfer asks only for a live replica, and may bring
// an offline shard back.
func leaderStep(o Operator, st *statemachine.State, a models.Assignment, s models.ShardState) Step {
	online := s.Status == models.StatusOnline
	if o.Leader == "" || (online && s.Leader == o.Leader) || (!online && !o.Unclean) {
		return StepDone
	}
	_, live := st.Nodes.At(a.Cluster).Get(o.Leader)
	if !live || !slices.Contains(a.Shards[o.Shard].Replicas, o.Leader) {
		return StepDone
	}
	if o.Unclean {
		return StepLeader
	}
	_, draining := st.Drains[o.Leader]
	if draining || !shardInSync(st, a.Cluster, o.DB, o.Shard, []string{o.Leader}) {
		return StepDone
	}
	return StepLeader
}

// inReplicaStage: the operator still changes the replica set (counts
// against MaxMovesInFlight).
func inReplicaStage(s Step) bool {
	return s == StepAdd || s == StepWaitSync || s == StepLeaveLeader || s == StepRemove
}

// Operator records live under NS/operators/<db>/<shard>: a key per shard,
// small, written only by the master, fenced on its term.
func operatorsPrefix(k models.Keys) string { return k.OperatorPrefix() }

func operatorKey(k models.Keys, db string, shard int) string { return k.Operator(db, shard) }

// maxOperatorBytes bounds one record read back from etcd.
const maxOperatorBytes = 64 << 10

// decodeOperator reads a record from etcd (untrusted: another version, a
// restore or a person may have written it) and checks it names its key.
func decodeOperator(k models.Keys, kvp kv.KeyValue) (Operator, error) {
	var o Operator
	if len(kvp.Value) > maxOperatorBytes {
		return o, fmt.Errorf("operator %s: %d bytes, over %d", kvp.Key, len(kvp.Value), maxOperatorBytes)
	}
	if err := json.Unmarshal(kvp.Value, &o); err != nil {
		return o, fmt.Errorf("operator %s: %w", kvp.Key, err)
	}
	if operatorKey(k, o.DB, o.Shard) != kvp.Key {
		return o, fmt.Errorf("operator %s names shard %s/%d", kvp.Key, o.DB, o.Shard)
	}
	switch o.Kind {
	case OpMove:
		if len(o.To) == 0 {
			return o, fmt.Errorf("operator %s: move without target replicas", kvp.Key)
		}
	case OpLeader:
		if o.Leader == "" {
			return o, fmt.Errorf("operator %s: leader transfer without a leader", kvp.Key)
		}
	default:
		return o, fmt.Errorf("operator %s: unknown kind %q", kvp.Key, o.Kind)
	}
	return o, nil
}

// maxListedOperators bounds what ListOperators returns.
const maxListedOperators = 100_000

// ListOperators reads the persisted operators from etcd, sorted by shard:
// any node can answer GET /api/v1/operators, master or not. Records that
// cannot be decoded are reported in bad and skipped.
func ListOperators(ctx context.Context, store kv.Store, keys models.Keys) (ops []Operator, bad []string, err error) {
	kvs, _, err := store.List(ctx, operatorsPrefix(keys))
	if err != nil {
		return nil, nil, fmt.Errorf("listing operators: %w", err)
	}
	ops = []Operator{}
	for _, kvp := range kvs {
		if len(ops) >= maxListedOperators {
			bad = append(bad, fmt.Sprintf("more than %d operators; the rest are not shown", maxListedOperators))
			break
		}
		o, err := decodeOperator(keys, kvp)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		ops = append(ops, o)
	}
	slices.SortFunc(ops, compareOps)
	return ops, bad, nil
}
