package simcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

// The observer's clock starts at the leases' end (the killed node's record
// deleted in etcd), not when the kill began; "led" waits for the shard to be
// online under a live leader (an offline state is not enough), "writable"
// for the new leader's in-sync set at its own term (the old term's is not).
func TestObserverTimesFromTheLeasesEnd(t *testing.T) {
	m := etcdtest.Start(t)
	store := m.Store(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := models.Keys{NS: "/sim"}
	ck := models.ClusterKeys{SNS: "/sim/storage/default"}
	putJSON := func(key string, v any) {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		_, err = store.Put(ctx, key, b, 0)
		require.NoError(t, err)
	}
	lease, err := store.Grant(ctx, 30*time.Second)
	require.NoError(t, err)
	_, err = store.Put(ctx, ck.Node("n1"), []byte(`{"node_id":"n1"}`), lease)
	require.NoError(t, err)
	putJSON(ck.Node("n2"), map[string]string{"node_id": "n2"})
	state := func(leader0, status0 string, term0 int64) models.ShardStates {
		return models.ShardStates{DB: "db", Shards: []models.ShardState{
			{ID: 0, Leader: leader0, Term: term0, Status: status0},
			{ID: 1, Leader: "n2", Term: 1, Status: models.StatusOnline},
		}}
	}
	putJSON(keys.ShardState("db"), state("n1", models.StatusOnline, 1))
	putJSON(ck.ISR("db", 0), models.ISR{Leader: "n1", Term: 1, Replicas: []string{"n1", "n2"}})

	w := Watch{Etcd: m.Endpoint, Nodes: ck.NodesPrefix(), States: keys.ShardStatePrefix(), ISR: ck.ISRPrefix(),
		Dead: []string{"n1"}, Shards: []string{models.ShardID("db", 0)}}
	spec, err := json.Marshal(w)
	require.NoError(t, err)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Observe(ctx, strings.NewReader(string(spec)), pw); pw.Close() }()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if !strings.HasPrefix(sc.Text(), lineLeft) {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	next := func(want string) time.Time {
		t.Helper()
		var line string
		require.Eventually(t, func() bool {
			select {
			case line = <-lines:
				return true
			default:
				return false
			}
		}, 10*time.Second, 5*time.Millisecond, "the observer's %q", want)
		f := strings.Fields(line)
		require.Equal(t, want, f[0], line)
		if len(f) == 1 {
			return time.Time{}
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err)
		return time.Unix(0, ns)
	}
	next(lineReady)

	// The shard offline, its leader still live: nothing yet. The lease's
	// revocation is the leases' end.
	putJSON(keys.ShardState("db"), state("", models.StatusOffline, 1))
	revoking := time.Now()
	require.NoError(t, store.Revoke(ctx, lease))
	gone := next(lineGone)
	require.False(t, gone.Before(revoking), "the clock starts at the record's deletion, not before")

	// Still offline: not led. Online under n2: led.
	putJSON(ck.ISR("db", 0), models.ISR{Leader: "n2", Term: 1, Replicas: []string{"n2"}}) // an old term's set
	publishing := time.Now()
	putJSON(keys.ShardState("db"), state("n2", models.StatusOnline, 2))
	led := next(lineLed)
	require.False(t, led.Before(publishing), "led only once the new leader is published")

	// The set at the old term does not make it writable; at term 2 it does.
	publishing = time.Now()
	putJSON(ck.ISR("db", 0), models.ISR{Leader: "n2", Term: 2, Replicas: []string{"n2"}})
	half, most := next(lineHalf), next(lineMost) // of one shard: when it is writable
	writable := next(lineWritable)
	require.False(t, half.Before(publishing), "writable only once the set is at the leader's term")
	require.Equal(t, half, most)
	require.Equal(t, most, writable)
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			require.NoError(t, err)
			return true
		default:
			return false
		}
	}, 10*time.Second, 5*time.Millisecond)
}

// TestFailoverLineNamesMarksNotReached: a run that ends before the new
// leaders take writes says so, instead of printing a zero time's distance
// from the leases' end (-9223372036855 ms).
func TestFailoverLineNamesMarksNotReached(t *testing.T) {
	gone := time.Unix(1000, 0)
	led := gone.Add(6952 * time.Millisecond)
	require.Equal(t, "failover led in 6952 ms, taking writes in not reached after the leases' end (half the new leaders in not reached, 90% in not reached)",
		failoverLine(gone, led, time.Time{}, time.Time{}, time.Time{}))
	require.Equal(t, "failover led in 153 ms, taking writes in 262 ms after the leases' end (half the new leaders in 230 ms, 90% in 262 ms)",
		failoverLine(gone, gone.Add(153*time.Millisecond), gone.Add(262*time.Millisecond), gone.Add(230*time.Millisecond), gone.Add(262*time.Millisecond)))
}

// After each watch answer the observer checks only the shards it changed:
// when a domain dies at 1,000 simulated nodes it waits for ~10,000 shards
// over tens of thousands of answers, and checking every waiting shard at
// each kept its view ~15 s behind etcd (the "writable" figure was mostly
// that lag). The figures stay those of every shard: led once all are led,
// writable once every new leader's set is published at its term.
func TestObserverLooksOnlyAtChangedShards(t *testing.T) {
	w := Watch{Nodes: "/n/", States: "/s/", ISR: "/i/", Dead: []string{"n0"}}
	const dbs, shards = 32, 32
	put := func(v any) kv.RawEvent {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return kv.RawEvent{Type: kv.EventPut, KV: kv.KeyValue{Value: b}}
	}
	states := map[string]models.ShardStates{}
	for d := range dbs {
		db := fmt.Sprintf("db%02d", d)
		ss := models.ShardStates{DB: db}
		for s := range shards {
			w.Shards = append(w.Shards, models.ShardID(db, s))
			ss.Shards = append(ss.Shards, models.ShardState{ID: s, Leader: "n0", Term: 1, Status: models.StatusOnline})
		}
		states[db] = ss
	}
	o := newObserved(w)
	apply := func(prefix, name string, ev kv.RawEvent) {
		ev.KV.Key = prefix + name
		o.apply(prefix, ev)
	}
	for db, ss := range states {
		apply(w.States, db, put(ss))
	}
	require.False(t, o.led(), "still led by the dead node")
	for d := range dbs {
		db := fmt.Sprintf("db%02d", d)
		ss := states[db]
		for i := range ss.Shards {
			ss.Shards[i].Leader, ss.Shards[i].Term = "n1", 2
		}
		apply(w.States, db, put(ss))
		require.Equal(t, d == dbs-1, o.led(), "database %d of %d led", d+1, dbs)
	}
	require.False(t, o.writable())
	before := o.looked
	for i, id := range w.Shards {
		apply(w.ISR, id, put(models.ISR{Leader: "n1", Term: 2, Replicas: []string{"n1"}}))
		require.Equal(t, i == len(w.Shards)-1, o.writable(), "shard %d of %d published", i+1, len(w.Shards))
	}
	require.LessOrEqual(t, o.looked-before, len(w.Shards), "one check per published set, not one per waiting shard")
}
