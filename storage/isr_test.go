package storage

import (
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

// TestDecideISR: the in-sync set decision on a fake clock. The cases that
// matter for issue 8 #5 are the idle ones: with no write arriving (acked ==
// last), a follower that stopped fetching or whose lease is gone must leave
// within the window.
func TestDecideISR(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const window = 2 * time.Second
	liveAll := func(string) bool { return true }
	liveBut := func(dead string) func(string) bool { return func(n string) bool { return n != dead } }
	cases := []struct {
		name      string
		now       time.Time
		isr       []string
		replicas  []string
		last      uint64
		committed uint64 // the highest txn acknowledged to a writer
		acked     map[string]uint64
		caught    map[string]time.Time
		fetched   map[string]time.Time
		parked    map[string]int
		sent      map[string]uint64
		live      func(string) bool
		drop, add []string
		join      []string
	}{
		{name: "idle and fetching: stays", now: t0.Add(10 * time.Second), isr: []string{"a", "b"}, replicas: []string{"a", "b"},
			last: 5, acked: map[string]uint64{"b": 5}, caught: map[string]time.Time{"b": t0},
			fetched: map[string]time.Time{"b": t0.Add(9500 * time.Millisecond)}, live: liveAll},
		{name: "idle, stopped fetching within the window: stays", now: t0.Add(window), isr: []string{"a", "b"}, replicas: []string{"a", "b"},
			last: 5, acked: map[string]uint64{"b": 5}, caught: map[string]time.Time{"b": t0}, fetched: map[string]time.Time{"b": t0}, live: liveAll},
		{name: "idle, stopped fetching past the window (kill -9, lease still running): leaves", now: t0.Add(window + time.Millisecond),
			isr: []string{"a", "b", "c"}, replicas: []string{"a", "b", "c"}, last: 5, acked: map[string]uint64{"b": 5, "c": 5},
			caught: map[string]time.Time{"b": t0, "c": t0}, fetched: map[string]time.Time{"b": t0, "c": t0.Add(time.Second)},
			live: liveAll, drop: []string{"b"}},
		{name: "idle, lease gone: leaves at once", now: t0.Add(100 * time.Millisecond), isr: []string{"a", "b"}, replicas: []string{"a", "b"},
			last: 5, acked: map[string]uint64{"b": 5}, caught: map[string]time.Time{"b": t0}, fetched: map[string]time.Time{"b": t0},
			live: liveBut("b"), drop: []string{"b"}},
		{name: "fetching but not catching up past the window: leaves", now: t0.Add(3 * time.Second), isr: []string{"a", "b"},
			replicas: []string{"a", "b"}, last: 9, acked: map[string]uint64{"b": 5}, caught: map[string]time.Time{"b": t0},
			fetched: map[string]time.Time{"b": t0.Add(2900 * time.Millisecond)}, live: liveAll, drop: []string{"b"}},
		{name: "behind under load but caught up recently: stays", now: t0.Add(3 * time.Second), isr: []string{"a", "b"},
			replicas: []string{"a", "b"}, last: 9, acked: map[string]uint64{"b": 8}, caught: map[string]time.Time{"b": t0.Add(2500 * time.Millisecond)},
			fetched: map[string]time.Time{"b": t0.Add(2900 * time.Millisecond)}, live: liveAll},
		{name: "moved off the shard: leaves", now: t0, isr: []string{"a", "b"}, replicas: []string{"a"},
			last: 1, acked: map[string]uint64{"b": 1}, caught: map[string]time.Time{"b": t0}, fetched: map[string]time.Time{"b": t0},
			live: liveAll, drop: []string{"b"}},
		{name: "caught up and fetching: joins", now: t0.Add(500 * time.Millisecond), isr: []string{"a"}, replicas: []string{"a", "b"},
			last: 3, acked: map[string]uint64{"b": 3}, caught: map[string]time.Time{"b": t0.Add(400 * time.Millisecond)},
			fetched: map[string]time.Time{"b": t0.Add(400 * time.Millisecond)}, live: liveAll, add: []string{"b"}},
		{name: "caught up once but not live: does not join", now: t0.Add(500 * time.Millisecond), isr: []string{"a"}, replicas: []string{"a", "b"},
			last: 3, acked: map[string]uint64{"b": 3}, caught: map[string]time.Time{"b": t0.Add(400 * time.Millisecond)},
			fetched: map[string]time.Time{"b": t0.Add(400 * time.Millisecond)}, live: liveBut("b")},
		{name: "parked with our last entry, caught long ago (back from a lease blip): joins", now: t0.Add(25 * time.Second), isr: []string{"a"},
			replicas: []string{"a", "b"}, last: 3, committed: 3, acked: map[string]uint64{"b": 3}, caught: map[string]time.Time{"b": t0},
			fetched: map[string]time.Time{"b": t0}, parked: map[string]int{"b": 1}, live: liveAll, add: []string{"b"}},
		{name: "parked without our last entry, caught long ago: does not join", now: t0.Add(25 * time.Second), isr: []string{"a"},
			replicas: []string{"a", "b"}, last: 4, committed: 3, acked: map[string]uint64{"b": 3}, caught: map[string]time.Time{"b": t0},
			fetched: map[string]time.Time{"b": t0}, parked: map[string]int{"b": 1}, live: liveAll},
		{name: "caught up long ago, silent since: does not join", now: t0.Add(5 * time.Second), isr: []string{"a"}, replicas: []string{"a", "b"},
			last: 3, acked: map[string]uint64{"b": 3}, caught: map[string]time.Time{"b": t0.Add(4500 * time.Millisecond)},
			fetched: map[string]time.Time{"b": t0.Add(3 * time.Second)}, live: liveAll},
		{name: "idle, its batched fetch parked here past the window: stays", now: t0.Add(5 * time.Second), isr: []string{"a", "b"},
			replicas: []string{"a", "b"}, last: 5, acked: map[string]uint64{"b": 5}, caught: map[string]time.Time{"b": t0},
			fetched: map[string]time.Time{"b": t0}, parked: map[string]int{"b": 1}, live: liveAll},
		{name: "parked but its lease gone: leaves", now: t0.Add(time.Second), isr: []string{"a", "b"},
			replicas: []string{"a", "b"}, last: 5, acked: map[string]uint64{"b": 5}, caught: map[string]time.Time{"b": t0},
			fetched: map[string]time.Time{"b": t0}, parked: map[string]int{"b": 1}, live: liveBut("b"), drop: []string{"b"}},
		{name: "caught up and parked: joins", now: t0.Add(3 * time.Second), isr: []string{"a"}, replicas: []string{"a", "b"},
			last: 3, acked: map[string]uint64{"b": 3}, caught: map[string]time.Time{"b": t0.Add(2900 * time.Millisecond)},
			fetched: map[string]time.Time{"b": t0}, parked: map[string]int{"b": 1}, live: liveAll, add: []string{"b"}},
		// Issue 8, nemesis seed 1: a follower killed (-9) right after its
		// fetch that brought it to 3059 restarts and fetches from 3059, where
		// the leader was at that fetch: caught up by the lag rule, while
		// the leader acknowledged up to 3306 without it meanwhile. It joined
		// the set, the master moved the leadership to it and the others
		// truncated 247 acknowledged entries. It must not join the set
		// before it holds them; acknowledgements wait for it meanwhile.
		{name: "caught up by the lag rule but missing acknowledged entries (restarted follower): waits to join", now: t0.Add(500 * time.Millisecond),
			isr: []string{"a", "b"}, replicas: []string{"a", "b", "c"}, last: 3306, committed: 3306,
			acked:   map[string]uint64{"b": 3306, "c": 3059},
			caught:  map[string]time.Time{"b": t0.Add(400 * time.Millisecond), "c": t0.Add(400 * time.Millisecond)},
			fetched: map[string]time.Time{"b": t0.Add(400 * time.Millisecond), "c": t0.Add(400 * time.Millisecond)},
			live:    liveAll, join: []string{"c"}},
		{name: "holding every acknowledged entry, behind the last unacknowledged one: joins", now: t0.Add(500 * time.Millisecond),
			isr: []string{"a", "b"}, replicas: []string{"a", "b", "c"}, last: 3310, committed: 3306,
			acked:   map[string]uint64{"b": 3306, "c": 3306},
			caught:  map[string]time.Time{"b": t0.Add(400 * time.Millisecond), "c": t0.Add(400 * time.Millisecond)},
			fetched: map[string]time.Time{"b": t0.Add(400 * time.Millisecond), "c": t0.Add(400 * time.Millisecond)},
			live:    liveAll, add: []string{"c"}},
		{name: "missing acknowledged entries and not caught up: neither", now: t0.Add(500 * time.Millisecond),
			isr: []string{"a"}, replicas: []string{"a", "c"}, last: 3306, committed: 3306,
			acked: map[string]uint64{"c": 3059}, caught: map[string]time.Time{}, fetched: map[string]time.Time{"c": t0.Add(400 * time.Millisecond)},
			live: liveAll},
		{name: "new empty shard, member not fetched yet past the window: stays", now: t0.Add(window + time.Second),
			isr: []string{"a", "b"}, replicas: []string{"a", "b"}, last: 0, acked: map[string]uint64{},
			caught: map[string]time.Time{"b": t0}, fetched: map[string]time.Time{"b": t0}, live: liveAll},
		{name: "new empty shard, member fetched once then stopped past the window: leaves", now: t0.Add(window + time.Second),
			isr: []string{"a", "b"}, replicas: []string{"a", "b"}, last: 0, acked: map[string]uint64{},
			caught: map[string]time.Time{"b": t0}, fetched: map[string]time.Time{"b": t0}, sent: map[string]uint64{"b": 0},
			live: liveAll, drop: []string{"b"}},
		{name: "member not fetched yet, an entry waited past the window: leaves", now: t0.Add(window + time.Second),
			isr: []string{"a", "b"}, replicas: []string{"a", "b"}, last: 1, acked: map[string]uint64{},
			caught: map[string]time.Time{"b": t0}, fetched: map[string]time.Time{"b": t0}, live: liveAll, drop: []string{"b"}},
		{name: "never fetched: does not join", now: t0, isr: []string{"a"}, replicas: []string{"a", "b"}, last: 0,
			acked: map[string]uint64{}, caught: map[string]time.Time{}, fetched: map[string]time.Time{}, live: liveAll},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			drop, add, join := decideISR(tc.now, isrView{self: "a", isr: tc.isr, replicas: tc.replicas, last: tc.last, committed: tc.committed,
				acked: tc.acked, caught: tc.caught, fetched: tc.fetched, parked: tc.parked, sent: tc.sent, live: tc.live, window: window})
			require.Equal(t, tc.drop, drop, "drop")
			require.Equal(t, tc.add, add, "add")
			require.Equal(t, tc.join, join, "join")
		})
	}
}

func TestStaleISR(t *testing.T) {
	tests := []struct {
		name              string
		set               models.ISR
		ok                bool
		lastTerm, lastTxn uint64
		cid               uint64
		stale             bool
	}{
		{name: "fresh shard, no record, empty log", stale: false},
		{name: "no record but data (restored before the first write)", lastTerm: 2, lastTxn: 9, stale: true},
		{name: "record at our log's term: the usual takeover", set: models.ISR{Term: 4}, ok: true, lastTerm: 4, lastTxn: 9},
		{name: "record newer than our log", set: models.ISR{Term: 5}, ok: true, lastTerm: 4, lastTxn: 9},
		{name: "our log holds a term the record never saw", set: models.ISR{Term: 3}, ok: true, lastTerm: 4, lastTxn: 9, stale: true},
		{name: "written in another etcd", set: models.ISR{Term: 4, ClusterID: 7}, ok: true, lastTerm: 4, lastTxn: 9, cid: 8, stale: true},
		{name: "written in this etcd", set: models.ISR{Term: 4, ClusterID: 8}, ok: true, lastTerm: 4, lastTxn: 9, cid: 8},
		{name: "cluster unknown", set: models.ISR{Term: 4, ClusterID: 7}, ok: true, lastTerm: 4, lastTxn: 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.stale, staleISR(tc.set, tc.ok, tc.lastTerm, tc.lastTxn, tc.cid))
		})
	}
}
