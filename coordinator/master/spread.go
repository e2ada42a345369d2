package master

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/cairn-db/cairn/models"
)

// SpreadInput is what the leader-spreading decision reads about one database.
type SpreadInput struct {
	ShardInputs
	// StableSince is when the storage membership of the database's cluster
	// last changed; leaders move only once it has been stable for Delay.
	StableSince time.Time
	Now         time.Time
	Delay       time.Duration
	// MaxMoves caps the transfers of one decision (0: no cap).
	MaxMoves int
}

// SpreadLeaders decides graceful leader transfers that spread one database's
// leadership over its nodes to max - min <= 1 per node (as close as the
// in-sync sets allow), with the fewest transfers: a returning node otherwise
// leads nothing until the next failover. It moves nothing until membership
// has been stable for Delay. Only online shards with a live leader move, and
// only to a live, non-draining replica that takes writes in the shard's in-sync set, each at
// NextTerm. It returns the new states and the shards that changed.
func SpreadLeaders(in SpreadInput) (models.ShardStates, []int) {
	if in.Now.Sub(in.StableSince) < in.Delay {
		return in.States, nil
	}
	next := models.ShardStates{DB: in.DB, Shards: slices.Clone(in.States.Shards), UID: in.States.UID}
	// Candidates per movable shard, and the current leader counts over every
	// node that may lead something.
	type movable struct {
		idx   int // in next.Shards
		cands []string
	}
	byShard := map[int]movable{}
	count := map[string]int{}
	assigned := map[int]models.ShardAssignment{}
	for _, sh := range in.Assign.Shards {
		assigned[sh.ID] = sh
	}
	for i, s := range next.Shards {
		sh, ok := assigned[s.ID]
		leader, leaderLive := in.Live.Get(s.Leader)
		_, leaderDraining := in.Drains[s.Leader]
		if !ok || s.Status != models.StatusOnline || !leaderLive || leaderDraining || !leader.Writable() || !slices.Contains(sh.Replicas, s.Leader) {
			continue // failover's or the drain's business
		}
		var cands []string
		for _, n := range inSync(in.ShardInputs, sh) {
			node, live := in.Live.Get(n)
			_, draining := in.Drains[n]
			if live && !draining && node.Writable() && slices.Contains(sh.Replicas, n) {
				cands = append(cands, n)
				if _, seen := count[n]; !seen {
					count[n] = 0
				}
			}
		}
		count[s.Leader]++
		byShard[s.ID] = movable{idx: i, cands: cands}
	}
	if spreadOf(count) <= 1 {
		return in.States, nil // the common case: nothing to search
	}
	leaderOf := func(id int) string { return next.Shards[byShard[id].idx].Leader }
	ids := slices.Sorted(maps.Keys(byShard))
	nodes := slices.Sorted(maps.Keys(count))
	moved := map[int]bool{}
	// Each augmentation lowers the sum of squared counts, so this ends; the
	// bound is a guard.
	for range len(ids)*len(nodes) + 1 {
		if in.MaxMoves > 0 && len(moved) >= in.MaxMoves {
			break
		}
		path := improvingPath(nodes, ids, count, leaderOf, func(id int) []string { return byShard[id].cands })
		if path == nil {
			break
		}
		for _, step := range path {
			next.Shards[byShard[step.shard].idx].Leader = step.to
			moved[step.shard] = true
		}
		count[path[0].from]--
		count[path[len(path)-1].to]++
	}
	var changed []int
	for _, id := range ids {
		i := byShard[id].idx
		prev := in.States.Shards[i]
		if !moved[id] || next.Shards[i].Leader == prev.Leader {
			next.Shards[i] = prev
			continue
		}
		next.Shards[i] = models.ShardState{ID: id, Leader: next.Shards[i].Leader, Term: NextTerm(in.ShardInputs, prev), Status: models.StatusOnline}
		changed = append(changed, id)
	}
	return next, changed
}

type transfer struct {
	shard    int
	from, to string
}

// improvingPath finds the shortest chain of leadership hand-overs from a
// node u to a node v leading at least two shards fewer: each step passes one
// shard from its leader to one of its candidates. Most loaded sources first,
// then node ids, so the decision is deterministic. nil when none exists.
func improvingPath(nodes []string, ids []int, count map[string]int, leaderOf func(int) string, cands func(int) []string) []transfer {
	srcs := slices.Clone(nodes)
	slices.SortStableFunc(srcs, func(a, b string) int { return count[b] - count[a] })
	for _, src := range srcs {
		type hop struct {
			prev string
			via  int
		}
		seen := map[string]hop{src: {}}
		queue := []string{src}
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			if u != src && count[u] <= count[src]-2 {
				var path []transfer
				for v := u; v != src; v = seen[v].prev {
					path = append(path, transfer{shard: seen[v].via, from: seen[v].prev, to: v})
				}
				slices.Reverse(path)
				return path
			}
			for _, id := range ids {
				if leaderOf(id) != u {
					continue
				}
				for _, v := range cands(id) {
					if _, ok := seen[v]; !ok {
						seen[v] = hop{prev: u, via: id}
						queue = append(queue, v)
					}
				}
			}
		}
	}
	return nil
}

// spreadOf is max - min of the counts (0 when empty).
func spreadOf(count map[string]int) int {
	if len(count) == 0 {
		return 0
	}
	lo, hi := math.MaxInt, math.MinInt
	for _, c := range count {
		lo, hi = min(lo, c), max(hi, c)
	}
	return hi - lo
}
