package kv_test

import (
	"context"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/stretchr/testify/require"
)

func testElection(t *testing.T, s kv.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	el := kv.NewElection(s, "/el/master")
	s1, err := kv.NewSession(ctx, s, 2*time.Second)
	require.NoError(t, err)
	s2, err := kv.NewSession(ctx, s, 2*time.Second)
	require.NoError(t, err)
	defer s2.Close(ctx)

	term1, err := el.Campaign(ctx, s1, []byte("one"))
	require.NoError(t, err)
	type result struct {
		term int64
		err  error
	}
	second := make(chan result, 1)
	go func() {
		term, err := el.Campaign(ctx, s2, []byte("two"))
		second <- result{term, err}
	}()
	// The fenced write of the holder works; the loser has none.
	ok, _, err := el.FencedTxn(ctx, term1, nil, []kv.Op{kv.OpPut("/el/data", []byte("by-one"), 0)})
	require.NoError(t, err)
	require.True(t, ok)
	select {
	case r := <-second:
		t.Fatalf("second candidate won while the first held the key: %+v", r)
	default:
	}

	// Depose the first by revoking its lease underneath it.
	require.NoError(t, s.Revoke(ctx, s1.Lease()))
	var r result
	select {
	case r = <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("standby did not take over")
	}
	require.NoError(t, r.err)
	require.Greater(t, r.term, term1)
	_, _, err = el.FencedTxn(ctx, term1, nil, []kv.Op{kv.OpPut("/el/data", []byte("stale"), 0)})
	require.ErrorIs(t, err, kv.ErrDeposed)
	kvp, err := s.Get(ctx, "/el/data")
	require.NoError(t, err)
	require.Equal(t, "by-one", string(kvp.Value), "the deposed master changed nothing")
	require.Eventually(t, func() bool { return !s1.Alive() }, 10*time.Second, 10*time.Millisecond)
	_, err = el.Campaign(ctx, s1, []byte("one"))
	require.ErrorIs(t, err, kv.ErrSessionLost)

	// Resign hands over at once.
	require.NoError(t, el.Resign(ctx, r.term))
	got, err := s.Get(ctx, "/el/master")
	require.NoError(t, err)
	require.Nil(t, got)
}

func TestElectionMemory(t *testing.T) {
	s := kv.NewMemoryStore()
	defer s.Close()
	testElection(t, s)
}

func TestElectionEtcd(t *testing.T) { testElection(t, etcdtest.Start(t).Store(t)) }
