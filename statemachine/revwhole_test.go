package statemachine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// A published state that shows a source at revision R shows every key that
// R wrote: a txn's many keys are one revision, and a writer that waits for
// its revision (the master after publishing many databases' states in one
// txn) must then read all of them, never some still old.
func TestStateShowsARevisionWhole(t *testing.T) {
	store := etcdtest.Start(t).Store(t)
	k := models.Keys{NS: "/whole"}
	ctx := context.Background()
	m := statemachine.New(statemachine.Config{})
	m.Start(ctx)
	defer m.Stop()
	for _, src := range statemachine.MainSources(store, k) {
		m.AddSource(src)
	}
	require.Eventually(t, func() bool { return m.Snapshot().Synced[statemachine.SourceDatabaseConfig] }, 10*time.Second, time.Millisecond)

	const txns, perTxn = 80, 100 // etcd takes at most 128 operations per txn
	revs := make(chan int64, txns)
	wctx, stop := context.WithCancel(ctx)
	wrote := make(chan struct{})
	defer func() { stop(); <-wrote }()
	go func() {
		defer close(wrote)
		defer close(revs)
		for i := range txns {
			ops := make([]kv.Op, 0, perTxn)
			for j := range perTxn {
				name := fmt.Sprintf("db%03d", j)
				ops = append(ops, kv.OpPut(k.DatabaseConfig(name), mustJSON(t, models.Database{Name: name, NumShards: i + 1}), 0))
			}
			ok, rev, err := store.Txn(wctx, nil, ops)
			if wctx.Err() != nil {
				return // the test ended first
			}
			if err != nil || !ok {
				t.Errorf("txn %d: ok %v, %v", i, ok, err)
				return
			}
			revs <- rev
		}
	}()
	// Every publication until the last txn's revision shows: whatever
	// revision it claims, every key that revision wrote is there (or a
	// later value).
	written := map[int64]int{} // revision -> the txn's NumShards
	var last int64
	checked := 0
	for {
		ch := m.Changed()
		st := m.Snapshot()
		at := st.Revisions[statemachine.SourceDatabaseConfig]
		if n, ok := written[at]; ok {
			checked++
			for j := range perTxn {
				name := fmt.Sprintf("db%03d", j)
				db, _ := st.Databases.Get(name)
				// (a later txn's first keys may show already)
				require.GreaterOrEqual(t, db.NumShards, n, "state at revision %d shows %s as of an older revision", at, name)
			}
		}
		if revs == nil && (at >= last || t.Failed()) {
			break
		}
		select {
		case rev, ok := <-revs:
			if !ok {
				revs = nil
				continue
			}
			written[rev] = len(written) + 1
			last = rev
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("no publication: state at revision %d, last txn at %d", at, last)
		}
	}
	require.Positive(t, checked)
}
