package master

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWorkQueueDedupsAndBacksOffPerKey(t *testing.T) {
	t0 := time.Unix(1000, 0)
	jitter := 0.0
	q := newWorkQueue(10*time.Millisecond, 80*time.Millisecond, func() float64 { return jitter })
	q.Add("b")
	q.Add("a")
	q.Add("b")
	require.Equal(t, []string{"a", "b"}, q.Due(t0), "sorted and deduplicated")
	require.Empty(t, q.Due(t0), "Due removes what it returns")
	_, waiting := q.Next()
	require.False(t, waiting)

	// a fails: it waits out its back-off while b is served at every pass.
	wants := []time.Duration{10, 20, 40, 80, 80} // ms: doubling, capped
	now := t0
	for i, want := range wants {
		d := q.Failed("a", now)
		require.Equal(t, want*time.Millisecond, d, "failure %d", i+1)
		require.Equal(t, i+1, q.Failures("a"))
		next, ok := q.Next()
		require.True(t, ok)
		require.Equal(t, now.Add(d), next)
		q.Add("a") // new events do not cut a back-off short
		q.Add("b")
		require.Equal(t, []string{"b"}, q.Due(now.Add(d-time.Nanosecond)))
		now = now.Add(d)
		require.Equal(t, []string{"a"}, q.Due(now))
	}
	q.Forget("a")
	require.Zero(t, q.Failures("a"))
	require.Equal(t, 10*time.Millisecond, q.Failed("a", now), "a success resets the back-off")

	// Jitter takes up to half the delay off, never more.
	jitter = 0.999
	q.Forget("a")
	d := q.Failed("a", now)
	require.Greater(t, d, 5*time.Millisecond-time.Microsecond)
	require.Less(t, d, 10*time.Millisecond)
}

func TestTrackMembershipWaitsForTheDelay(t *testing.T) {
	t0 := time.Unix(5000, 0)
	delay := 30 * time.Second
	mb, due := TrackMembership(Membership{}, false, "a,b,c", t0, delay)
	require.False(t, due, "first sight is taken as stable from now")
	require.Equal(t, t0, mb.Since)
	_, due = TrackMembership(mb, true, "a,b,c", t0.Add(delay-time.Nanosecond), delay)
	require.False(t, due)
	mb, due = TrackMembership(mb, true, "a,b,c", t0.Add(delay), delay)
	require.True(t, due, "stable for the delay and never found balanced")
	mb.Balanced = "a,b,c"
	_, due = TrackMembership(mb, true, "a,b,c", t0.Add(time.Hour), delay)
	require.False(t, due, "balanced at this membership")
	// A node leaves: the clock restarts at the change.
	t1 := t0.Add(2 * time.Hour)
	mb, due = TrackMembership(mb, true, "a,b", t1, delay)
	require.False(t, due)
	require.Equal(t, t1, mb.Since)
	_, due = TrackMembership(mb, true, "a,b", t1.Add(delay), delay)
	require.True(t, due)
	// It returns before the delay: back to the balanced membership, no plan,
	// but the change restarts the clock that leader spreading reads.
	mb, due = TrackMembership(mb, true, "a,b,c", t1.Add(time.Second), delay)
	require.False(t, due)
	require.Equal(t, t1.Add(time.Second), mb.Since)
}
