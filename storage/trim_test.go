package storage

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTrimFloor: the leader's log is kept for in-sync followers and for
// followers fetching now (catching up to join), down to the lowest txn one
// of them acknowledged; nobody else holds it back.
func TestTrimFloor(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const window = 2 * time.Second
	const all = ^uint64(0)
	cases := []struct {
		name     string
		isr      []string
		replicas []string
		acked    map[string]uint64
		fetched  map[string]time.Time
		parked   map[string]int
		want     uint64
	}{
		{name: "alone", isr: []string{"a"}, replicas: []string{"a"}, want: all},
		{name: "in-sync followers: the slowest", isr: []string{"a", "b", "c"}, replicas: []string{"a", "b", "c"},
			acked: map[string]uint64{"b": 40, "c": 35}, want: 35},
		{name: "in-sync follower that never fetched holds everything", isr: []string{"a", "b"}, replicas: []string{"a", "b"},
			want: 0},
		{name: "in-sync but silent still holds (until it is dropped)", isr: []string{"a", "b"}, replicas: []string{"a", "b"},
			acked: map[string]uint64{"b": 7}, fetched: map[string]time.Time{"b": t0.Add(-time.Hour)}, want: 7},
		{name: "catching up, fetching now", isr: []string{"a", "b"}, replicas: []string{"a", "b", "c"},
			acked: map[string]uint64{"b": 40, "c": 12}, fetched: map[string]time.Time{"c": t0.Add(-time.Second)}, want: 12},
		{name: "catching up, parked fetch", isr: []string{"a"}, replicas: []string{"a", "c"},
			acked: map[string]uint64{"c": 12}, fetched: map[string]time.Time{"c": t0.Add(-time.Hour)}, parked: map[string]int{"c": 1}, want: 12},
		{name: "out of sync and silent: a snapshot later", isr: []string{"a", "b"}, replicas: []string{"a", "b", "c"},
			acked: map[string]uint64{"b": 40, "c": 3}, fetched: map[string]time.Time{"c": t0.Add(-3 * time.Second)}, want: 40},
		{name: "fetching but no longer assigned", isr: []string{"a"}, replicas: []string{"a"},
			acked: map[string]uint64{"c": 3}, fetched: map[string]time.Time{"c": t0}, want: all},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := trimFloor(t0, isrView{self: "a", isr: tc.isr, replicas: tc.replicas, acked: tc.acked,
				fetched: tc.fetched, parked: tc.parked, window: window})
			require.Equal(t, tc.want, got)
		})
	}
}
