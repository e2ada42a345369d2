package kv_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/stretchr/testify/require"
)

// A txn's keys share one revision: every event of it but the last says more
// of its revision follows (More), so a consumer never counts the revision
// seen with some of its keys still old; a list's events are all More, its
// WatchSynced ends it.
func TestWatchMarksARevisionsOtherKeys(t *testing.T) {
	s := etcdtest.Start(t).Store(t)
	ctx := context.Background()
	p := "/wr/"
	for _, k := range []string{"l1", "l2"} {
		_, err := s.Put(ctx, p+k, []byte("v"), 0)
		require.NoError(t, err)
	}
	events := watchEvents(t, kv.WatcherConfig{Store: s, Prefix: p})
	require.Eventually(t, func() bool { return len(events()) == 3 }, 10*time.Second, 5*time.Millisecond)
	for _, ev := range events()[:2] {
		require.True(t, ev.More, "a listed key: the list ends at WatchSynced")
	}
	require.Equal(t, kv.WatchSynced, events()[2].Kind)
	require.False(t, events()[2].More)

	// One txn of three puts; then one deleting a listed key, putting one
	// and deleting another in the same revision.
	ok, rev1, err := s.Txn(ctx, nil, []kv.Op{kv.OpPut(p+"a", []byte("1"), 0), kv.OpPut(p+"b", []byte("1"), 0), kv.OpPut(p+"c", []byte("1"), 0)})
	require.NoError(t, err)
	require.True(t, ok)
	ok, rev2, err := s.Txn(ctx, nil, []kv.Op{kv.OpDelete(p + "l1"), kv.OpPut(p+"d", []byte("1"), 0), kv.OpDelete(p + "a")})
	require.NoError(t, err)
	require.True(t, ok)
	// A revision of one event (deleting a key that does not exist makes
	// none).
	ok, rev3, err := s.Txn(ctx, nil, []kv.Op{kv.OpPut(p+"b", []byte("2"), 0), kv.OpDelete(p + "zz")})
	require.NoError(t, err)
	require.True(t, ok)
	require.Eventually(t, func() bool { return len(events()) == 3+3+3+1 }, 10*time.Second, 5*time.Millisecond)
	evs := events()[3:]
	type seen struct {
		kind kv.WatchEventKind
		key  string
		rev  int64
		more bool
	}
	var out []seen
	for _, ev := range evs {
		out = append(out, seen{ev.Kind, ev.Key, ev.Rev, ev.More})
	}
	require.Equal(t, []seen{
		{kv.WatchPut, p + "a", rev1, true}, {kv.WatchPut, p + "b", rev1, true}, {kv.WatchPut, p + "c", rev1, false},
		{kv.WatchDelete, p + "l1", rev2, true}, {kv.WatchPut, p + "d", rev2, true}, {kv.WatchDelete, p + "a", rev2, false},
		{kv.WatchPut, p + "b", rev3, false},
	}, out)
}

// watchEvents runs a watcher of cfg until the test ends and returns what it
// emitted so far.
func watchEvents(t *testing.T, cfg kv.WatcherConfig) func() []kv.WatchEvent {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got []kv.WatchEvent
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		kv.RunWatcher(ctx, cfg, func(ev kv.WatchEvent) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, ev)
		})
	}()
	return func() []kv.WatchEvent {
		mu.Lock()
		defer mu.Unlock()
		return append([]kv.WatchEvent(nil), got...)
	}
}

// scriptedWatch is a store whose watch sends the given responses.
type scriptedWatch struct {
	kv.Store
	resps []kv.RawWatchResponse
}

func (s scriptedWatch) Watch(ctx context.Context, prefix string, fromRev int64) <-chan kv.RawWatchResponse {
	ch := make(chan kv.RawWatchResponse, len(s.resps))
	for _, r := range s.resps {
		ch <- r
	}
	go func() { <-ctx.Done(); close(ch) }()
	return ch
}

// A delete of a key the consumer never held is not emitted: when it is the
// last event of its revision, the event before it closes the revision.
func TestWatchClosesARevisionBeforeASkippedDelete(t *testing.T) {
	mem := kv.NewMemoryStore()
	t.Cleanup(func() { _ = mem.Close() }) // after the watcher's (cleanups run last first)
	put := func(key string, rev int64) kv.RawEvent {
		return kv.RawEvent{Type: kv.EventPut, KV: kv.KeyValue{Key: key, Value: []byte("v"), ModRev: rev, CreateRev: rev}}
	}
	del := func(key string, rev int64) kv.RawEvent {
		return kv.RawEvent{Type: kv.EventDelete, KV: kv.KeyValue{Key: key, ModRev: rev}}
	}
	s := scriptedWatch{Store: mem, resps: []kv.RawWatchResponse{
		{Events: []kv.RawEvent{put("/s/a", 5), del("/s/never", 5), put("/s/b", 5), del("/s/never2", 5), put("/s/c", 6), del("/s/never3", 7)}, Rev: 7},
	}}
	events := watchEvents(t, kv.WatcherConfig{Store: s, Prefix: "/s/"})
	require.Eventually(t, func() bool { return len(events()) >= 4 }, 10*time.Second, 5*time.Millisecond)
	got := events()
	require.Equal(t, kv.WatchSynced, got[0].Kind)
	var more []bool
	for _, ev := range got[1:4] {
		more = append(more, ev.More)
	}
	require.Equal(t, []string{"/s/a", "/s/b", "/s/c"}, []string{got[1].Key, got[2].Key, got[3].Key})
	require.Equal(t, []bool{true, false, false}, more)
}
