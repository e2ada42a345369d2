// Package placement decides where shard replicas live and which replica leads.
//
// It is a pure planner: it reads a Cluster snapshot and returns a Plan (target
// placement plus an ordered list of moves). It holds no state between calls and
// does no I/O, so the master and `cairn simulate`
// can all call it and tests can drive it with plain tables.
package placement

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

var (
	// ErrNotEnoughNodes means a shard wants more replicas than there are
	// non-draining nodes to hold them on distinct machines.
	ErrNotEnoughNodes = errors.New("not enough nodes")
	// ErrInvalidReplicaFactor means a shard asks for fewer than one replica.
	ErrInvalidReplicaFactor = errors.New("invalid replica factor")
	// ErrShardExists means PlaceNew was asked to place a shard that already has replicas.
	ErrShardExists = errors.New("shard already placed")
	// ErrUnplaceable means the planner could not complete a placement. It
	// should not happen when the node count check passes; it exists so a
	// planner bug surfaces as an error instead of a wrong layout.
	ErrUnplaceable = errors.New("placement could not be completed")
)

// ShardKey names one shard of one database.
type ShardKey struct {
	DB    string
	Shard int
}

func (k ShardKey) String() string { return fmt.Sprintf("%s/%d", k.DB, k.Shard) }

// compareKeys orders shard keys by database then shard number; every loop over
// shards uses this order so plans never depend on map iteration.
func compareKeys(a, b ShardKey) int {
	if c := cmp.Compare(a.DB, b.DB); c != 0 {
		return c
	}
	return cmp.Compare(a.Shard, b.Shard)
}

// Node is a storage node as placement sees it. Only live nodes are passed in.
type Node struct {
	ID       string
	Draining bool
	// Domain is the node's failure domain (the value of the storage
	// cluster's failure-domain label, e.g. its zone). "" puts the node in a
	// domain of its own. Only the spread policy reads it.
	Domain string
	// Weight is the node's relative capacity; 0 counts as 1. Only the
	// spread policy reads it.
	Weight int
}

// ShardPlacement is where one shard lives. Replicas are node ids, order
// irrelevant; Leader is one of them, or "" when the shard has no leader yet.
type ShardPlacement struct {
	Replicas []string
	Leader   string
}

// Cluster is the snapshot the planner reads.
type Cluster struct {
	Nodes []Node
	// Shards is the current placement. New shards may be absent or have empty
	// replicas and leader. Shards absent from Want are being dropped.
	Shards map[ShardKey]ShardPlacement
	// Want is the desired replica count per shard (the database replica factor).
	Want map[ShardKey]int
	// nodes, when set, is the spread planner's index of Nodes, kept by a
	// Sharder across its decisions (built once per change of its nodes,
	// not once per decision); it must describe exactly Nodes.
	nodes *nodeIndex
}

// MoveKind is the kind of one plan step.
type MoveKind string

// Move kinds.
const (
	MoveAdd    MoveKind = "add"
	MoveRemove MoveKind = "remove"
	MoveLeader MoveKind = "leader"
)

// Move is one step. A replica relocation is an "add" (To) followed later by a
// "remove" (From) of the same shard: the runner adds first, waits for sync,
// then removes, so a shard never has fewer replicas than before.
type Move struct {
	Kind  MoveKind
	Shard ShardKey
	From  string
	To    string
}

// Plan is the result of Place.
type Plan struct {
	// Target is the placement after all moves.
	Target map[ShardKey]ShardPlacement
	// Moves lists all adds (in shard order), then all leader changes, then all
	// removes, so that running them in order never lowers a shard's replica
	// count and a leader is only moved onto a replica that already exists.
	Moves []Move
	// Relocations counts replicas that change node. An add+remove pair counts
	// once; adding a replica to a new shard or for a higher replica factor, or
	// removing one for a lower replica factor, does not count.
	Relocations int
}

// Place computes the target placement with the fewest relocations such that
// every shard has Want replicas on distinct non-draining nodes, draining nodes
// hold and lead nothing, and replica and leader counts per non-draining node
// differ by at most one.
func Place(c Cluster) (Plan, error) {
	p, err := newPlanner(c)
	if err != nil {
		return Plan{}, err
	}
	p.trim()
	p.shed()
	if err := p.fill(); err != nil {
		return Plan{}, err
	}
	p.assignLeaders()
	return p.plan(), nil
}

// LowerBound is the minimum number of relocations a valid plan needs for c,
// or 0 if c cannot be placed at all.
//
// First a counting bound: each non-draining node can keep at most its share
// (q or q+1, with exactly r nodes at q+1) of what it holds now, and every
// other existing replica must move. When Place reaches that bound it is the
// minimum. It can be loose when replicas must sit on distinct nodes (say a
// replica factor raised to the node count pins every shard on every node);
// then, for small clusters, the exact minimum is computed by a min-cost flow
// over all shard x node pairs, independent of Place. Above that size the
// counting bound is returned as is.
func LowerBound(c Cluster) int {
	p, err := newPlanner(c)
	if err != nil {
		return 0
	}
	bound := p.countingBound()
	if len(p.shards)*len(p.nodeIDs) > exactLimit {
		return bound
	}
	if plan, err := Place(c); err == nil && plan.Relocations == bound {
		return bound
	}
	return exactRelocations(p)
}

// countingBound: see LowerBound. Replica factor decreases are applied first
// by dropping replicas from the most loaded nodes, as Place does.
func (p *planner) countingBound() int {
	p.trim()
	n := len(p.nodeIDs)
	q, r := p.total/n, p.total%n
	keep, atPlusOne := 0, 0
	for v := range n {
		cnt := p.cnt[v]
		keep += min(cnt, q)
		if cnt >= q+1 {
			atPlusOne++
		}
	}
	keep += min(r, atPlusOne)
	return p.mustHave() - keep
}

// PlaceNew places brand-new shards (for example a new database) next to the
// existing ones in c, keeping the global balance. It is Place on the cluster
// extended with add; shards in add must not already have replicas.
func PlaceNew(c Cluster, add map[ShardKey]int) (Plan, error) {
	ext, err := extend(c, add)
	if err != nil {
		return Plan{}, err
	}
	return Place(ext)
}

// extend is c wanting the shards of add too, which must not have replicas.
func extend(c Cluster, add map[ShardKey]int) (Cluster, error) {
	ext := Cluster{
		Nodes:  c.Nodes,
		nodes:  c.nodes,
		Shards: make(map[ShardKey]ShardPlacement, len(c.Shards)),
		Want:   make(map[ShardKey]int, len(c.Want)+len(add)),
	}
	for k, v := range c.Shards {
		ext.Shards[k] = v
	}
	for k, v := range c.Want {
		ext.Want[k] = v
	}
	keys := make([]ShardKey, 0, len(add))
	for k := range add {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	for _, k := range keys {
		if len(c.Shards[k].Replicas) > 0 {
			return Cluster{}, fmt.Errorf("placement: shard %s: %w", k, ErrShardExists)
		}
		ext.Want[k] = add[k]
	}
	return ext, nil
}

// checkWant reports a replica factor that n available nodes cannot hold.
func checkWant(k ShardKey, want, n int) error {
	if want < 1 {
		return fmt.Errorf("placement: shard %s: replica factor %d: %w", k, want, ErrInvalidReplicaFactor)
	}
	if want > n {
		return fmt.Errorf("placement: shard %s: replica factor %d exceeds %d available nodes: %w",
			k, want, n, ErrNotEnoughNodes)
	}
	return nil
}
