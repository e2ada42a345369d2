package master

import (
	"fmt"
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestTxnBatches: a publication batch's txn (a lock, the states and the
// extra ops of each database) stays within maxTxnOps and maxTxnBytes, the
// batches keep the updates' order, and a database too big for one is a
// batch of its own. The lock is per database: how many shards changed does
// not count (a lock per shard made 11 changed shards each 8 databases a
// batch).
func TestTxnBatches(t *testing.T) {
	up := func(db string, changed, extra, size int) statesUpdate {
		return statesUpdate{db: db, changed: make([]int, changed), extra: make([]kv.Op, extra), value: make([]byte, size)}
	}
	many := func(n, changed, size int) []statesUpdate {
		out := make([]statesUpdate, n)
		for i := range out {
			out[i] = up(fmt.Sprint(i), changed, 0, size)
		}
		return out
	}
	tests := []struct {
		name string
		ups  []statesUpdate
		want []int // databases per batch
	}{
		{name: "none", ups: nil, want: nil},
		{name: "one", ups: many(1, 11, 2000), want: []int{1}},
		{name: "11 changed shards each", ups: many(20, 11, 2000), want: []int{20}},
		{name: "one changed shard each", ups: many(250, 1, 2000), want: []int{50, 50, 50, 50, 50}},
		{name: "a database over the op limit alone", ups: []statesUpdate{up("a", 1, 0, 10), up("big", 300, 99, 10), up("c", 1, 0, 10)}, want: []int{1, 1, 1}},
		{name: "extra ops count", ups: []statesUpdate{up("a", 1, 60, 10), up("b", 1, 60, 10)}, want: []int{1, 1}},
		{name: "bytes count", ups: many(7, 1, 300<<10), want: []int{3, 3, 1}},
		{name: "a database over the byte limit alone", ups: []statesUpdate{up("a", 1, 0, 10), up("big", 1, 0, 2<<20), up("c", 1, 0, 10)}, want: []int{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			var order []string
			for _, b := range txnBatches(tt.ups) {
				got = append(got, len(b))
				ops, size := 0, 0
				for _, u := range b {
					order = append(order, u.db)
					ops, size = ops+2+len(u.extra), size+len(u.value)
				}
				require.True(t, len(b) == 1 || (ops <= maxTxnOps && size <= maxTxnBytes), "batch of %d: %d ops, %d bytes", len(b), ops, size)
			}
			require.Equal(t, tt.want, got)
			var want []string
			for _, u := range tt.ups {
				want = append(want, u.db)
			}
			require.Equal(t, want, order)
		})
	}
}

// TestLedSet: the databases found led stay remembered while the state's
// revisions are the same, and are all forgotten once any source moves.
func TestLedSet(t *testing.T) {
	var l ledSet
	st := &statemachine.State{Revisions: map[string]int64{"a": 1, "b": 2}}
	l.sync(st)
	l.dbs["x"] = true
	l.sync(&statemachine.State{Revisions: map[string]int64{"a": 1, "b": 2}})
	require.True(t, l.dbs["x"], "same revisions: remembered")
	st.Revisions["b"] = 3 // the map l.revs was cloned from
	l.sync(&statemachine.State{Revisions: map[string]int64{"a": 1, "b": 2}})
	require.True(t, l.dbs["x"], "the clone is l's own")
	for _, revs := range []map[string]int64{{"a": 1, "b": 3}, {"a": 1}, {"a": 1, "b": 2, "c": 1}} {
		l.dbs["x"] = true
		l.sync(&statemachine.State{Revisions: revs})
		require.False(t, l.dbs["x"], "revisions %v: forgotten", revs)
		l.sync(&statemachine.State{Revisions: map[string]int64{"a": 1, "b": 2}})
	}
}
