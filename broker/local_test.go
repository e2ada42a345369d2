package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLocalWritesGetTheirPreparedPoints: the shards this process leads are
// prepared once, right after the split, each with exactly its points; the
// first Local call of such a shard gets that, a retry gets nil (a prepared
// write is used once), and shards led elsewhere are neither prepared nor
// written locally.
func TestLocalWritesGetTheirPreparedPoints(t *testing.T) {
	const shards = 4
	var remote atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		remote.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	states := make([]models.ShardState, shards)
	for i := range states {
		leader := "self" // even shards here, odd ones on n2
		if i%2 == 1 {
			leader = "n2"
		}
		states[i] = models.ShardState{ID: i, Leader: leader, Term: 5, Status: models.StatusOnline}
	}
	st := &statemachine.State{
		Databases:   statemachine.MapOf(map[string]models.Database{"db": {Name: "db", StorageCluster: "default", NumShards: shards, ReplicaFactor: 1}}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{"db": {DB: "db", Shards: states}}),
		Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": {
			"self": {NodeID: "self", NodeAddress: "127.0.0.1:1"},
			"n2":   {NodeID: "n2", NodeAddress: strings.TrimPrefix(srv.URL, "http://")},
		}}),
	}

	type prepared struct{ points []lineproto.Point }
	// local is Local's body; a prepared write calls it with what Prepare
	// made.
	var local func(db string, shard int, term int64, points []lineproto.Point, p *prepared) error
	var mu sync.Mutex
	var preparedCalls int
	calls := map[int][]bool{} // per shard: whether each Local call had a prepared
	never := make(chan struct{})
	d := &broker.Data{State: func() *statemachine.State { return st }, Changed: func() <-chan struct{} { return never },
		Client: http.DefaultClient, WriteTimeout: 10 * time.Second, Self: "self",
	}
	write := func(_ context.Context, db string, shard int, term int64, points []lineproto.Point) error {
		return local(db, shard, term, points, nil)
	}
	prepare := func(points []lineproto.Point) broker.PreparedWrite {
		mu.Lock()
		preparedCalls++
		mu.Unlock()
		p := &prepared{slices.Clone(points)}
		return func(_ context.Context, db string, shard int, term int64) error {
			return local(db, shard, term, points, p)
		}
	}
	d.Local = localShards{write: write, prepare: prepare}
	local = func(db string, shard int, term int64, points []lineproto.Point, p *prepared) error {
		// assert, not require: this runs in the shard's goroutine.
		assert.Equal(t, "db", db)
		assert.Equal(t, int64(5), term)
		assert.Equal(t, 0, shard%2, "only the shards led here are written here")
		mu.Lock()
		first := len(calls[shard]) == 0
		calls[shard] = append(calls[shard], p != nil)
		mu.Unlock()
		if p != nil {
			assert.Equal(t, p.points, points, "shard %d: prepared of its very points", shard)
		}
		if first && shard == 0 {
			return fmt.Errorf("%w: once", storage.ErrStaleTerm) // retried
		}
		return nil
	}
	var body strings.Builder
	for i := range 64 {
		fmt.Fprintf(&body, "cpu,host=h%d v=%d 1\n", i, i)
	}
	require.NoError(t, d.Write(context.Background(), "db", "ns", []byte(body.String())))

	require.Equal(t, map[int][]bool{0: {true, false}, 2: {true}}, calls)
	require.Equal(t, 2, preparedCalls, "one Prepare per shard led here")
	require.Equal(t, int32(2), remote.Load(), "shards 1 and 3 went to n2")
}

// localShards is a broker.LocalShards made of a test's functions; without
// prepare, a prepared write is a plain one.
type localShards struct {
	write   func(ctx context.Context, db string, shard int, term int64, points []lineproto.Point) error
	prepare func(points []lineproto.Point) broker.PreparedWrite
}

func (l localShards) Write(ctx context.Context, db string, shard int, term int64, points []lineproto.Point) error {
	return l.write(ctx, db, shard, term, points)
}

func (l localShards) Prepare(points []lineproto.Point) broker.PreparedWrite {
	if l.prepare == nil {
		return func(ctx context.Context, db string, shard int, term int64) error {
			return l.write(ctx, db, shard, term, points)
		}
	}
	return l.prepare(points)
}

func (l localShards) Delete(context.Context, string, int, int64, *wire.Delete) error {
	return errors.New("this test deletes nothing locally")
}

func (l localShards) Select(context.Context, string, int, *query.ShardRequest) (*query.ShardResult, error) {
	return nil, errors.New("this test selects nothing locally")
}

// TestWritesPrepareAtMostOnePerProcessorAtOnce: with more writes than
// processors, only as many parse and prepare their batches at once; the
// others wait without a processor until one of them has started its
// shards' writes.
func TestWritesPrepareAtMostOnePerProcessorAtOnce(t *testing.T) {
	slots := runtime.GOMAXPROCS(0)
	st := &statemachine.State{
		Databases:   statemachine.MapOf(map[string]models.Database{"db": {Name: "db", StorageCluster: "default", NumShards: 1, ReplicaFactor: 1}}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{"db": {DB: "db", Shards: []models.ShardState{{ID: 0, Leader: "self", Term: 1, Status: models.StatusOnline}}}}),
		Nodes:       statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": {"self": {NodeID: "self", NodeAddress: "127.0.0.1:1"}}}),
	}
	var preparing atomic.Int32
	hold := make(chan struct{})
	d := &broker.Data{State: func() *statemachine.State { return st }, Self: "self",
		Changed: func() <-chan struct{} { return nil }, Client: http.DefaultClient, WriteTimeout: 10 * time.Second, Local: localShards{
			write: func(context.Context, string, int, int64, []lineproto.Point) error { return nil },
			prepare: func([]lineproto.Point) broker.PreparedWrite {
				preparing.Add(1)
				<-hold
				return func(context.Context, string, int, int64) error { return nil }
			},
		}}
	errs := make(chan error, slots+1)
	for range slots + 1 {
		go func() { errs <- d.Write(context.Background(), "db", "ns", []byte("cpu v=1 1\n")) }()
	}
	require.Eventually(t, func() bool { return preparing.Load() == int32(slots) }, 10*time.Second, time.Millisecond)
	require.Never(t, func() bool { return preparing.Load() > int32(slots) }, 100*time.Millisecond, time.Millisecond)
	close(hold)
	for range slots + 1 {
		require.NoError(t, <-errs)
	}
	require.EqualValues(t, slots+1, preparing.Load())
}

// starterShards is a localShards that also queues local writes in the
// caller's goroutine (storage.Host.Start).
type starterShards struct {
	localShards
	start func(db string, shard int, term int64, points []lineproto.Point) (func(context.Context) error, error)
}

func (s starterShards) Start(db string, shard int, term int64, points []lineproto.Point) (func(context.Context) error, error) {
	return s.start(db, shard, term, points)
}

// TestLocalWritesStartedInTheWritersGoroutine: with a Local that can start
// a write (storage.Host), every shard led here is started once, with its
// points, before any of them is durable; Write answers only once every one is; and a start or a wait
// that fails with a cause a retry can mend is retried through Write.
func TestLocalWritesStartedInTheWritersGoroutine(t *testing.T) {
	const shards = 4
	states := make([]models.ShardState, shards)
	for i := range states {
		states[i] = models.ShardState{ID: i, Leader: "self", Term: 5, Status: models.StatusOnline}
	}
	st := &statemachine.State{
		Databases:   statemachine.MapOf(map[string]models.Database{"db": {Name: "db", StorageCluster: "default", NumShards: shards, ReplicaFactor: 1}}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{"db": {DB: "db", Shards: states}}),
		Nodes:       statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": {"self": {NodeID: "self", NodeAddress: "127.0.0.1:1"}}}),
	}
	var mu sync.Mutex
	started := map[int]int{} // points started per shard
	var retried []int
	durable := make(chan struct{})
	inStart := make(chan struct{}, shards) // Start runs inside Write's call
	local := starterShards{
		localShards: localShards{write: func(_ context.Context, _ string, shard int, _ int64, _ []lineproto.Point) error {
			mu.Lock()
			retried = append(retried, shard)
			mu.Unlock()
			return nil
		}},
		start: func(db string, shard int, term int64, points []lineproto.Point) (func(context.Context) error, error) {
			assert.Equal(t, "db", db)
			assert.Equal(t, int64(5), term)
			for _, p := range points {
				assert.Equal(t, shard, lineproto.ShardOfSeries(p.Metric, p.Tags, p.Field, shards))
			}
			mu.Lock()
			started[shard] += len(points)
			mu.Unlock()
			inStart <- struct{}{}
			if shard == 1 {
				return nil, fmt.Errorf("%w: once", storage.ErrStaleTerm)
			}
			return func(ctx context.Context) error {
				<-durable
				if shard == 3 {
					return fmt.Errorf("%w: once", storage.ErrStaleTerm)
				}
				return nil
			}, nil
		},
	}
	never := make(chan struct{})
	d := &broker.Data{State: func() *statemachine.State { return st }, Changed: func() <-chan struct{} { return never },
		Client: http.DefaultClient, WriteTimeout: 10 * time.Second, Self: "self", Local: local}
	var body strings.Builder
	for i := range 64 {
		fmt.Fprintf(&body, "cpu,host=h%d v=%d 1\n", i, i)
	}
	done := make(chan error, 1)
	go func() { done <- d.Write(context.Background(), "db", "ns", []byte(body.String())) }()
	for range shards {
		<-inStart
	}
	require.Never(t, func() bool { return len(done) > 0 }, 50*time.Millisecond, time.Millisecond, "answered before its shards were durable")
	close(durable)
	require.NoError(t, <-done)
	total := 0
	for _, n := range started {
		total += n
	}
	require.Equal(t, 64, total)
	require.Len(t, started, shards)
	slices.Sort(retried)
	require.Equal(t, []int{1, 3}, retried, "the failed start and the failed wait retried, as plain writes")
}
