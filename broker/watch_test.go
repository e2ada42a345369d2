package broker

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// publisher is a state source as the state manager is one: Changed's
// channel is closed when a new state is published.
type publisher struct {
	mu sync.Mutex
	st *statemachine.State
	ch chan struct{}
}

func newPublisher(st *statemachine.State) *publisher {
	return &publisher{st: st, ch: make(chan struct{})}
}

func (p *publisher) State() *statemachine.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st
}

func (p *publisher) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ch
}

func (p *publisher) publish(st *statemachine.State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st = st
	close(p.ch)
	p.ch = make(chan struct{})
}

// ledBy is database "db" of shards shards, each led by leader at term,
// with nodes at their addresses.
func ledBy(shards int, leader string, term int64, nodes map[string]string) *statemachine.State {
	states := make([]models.ShardState, shards)
	for i := range states {
		states[i] = models.ShardState{ID: i, Leader: leader, Term: term, Status: models.StatusOnline}
	}
	ns := map[string]models.StorageNode{}
	for id, addr := range nodes {
		ns[id] = models.StorageNode{NodeID: id, NodeAddress: addr}
	}
	return &statemachine.State{
		Databases:   statemachine.MapOf(map[string]models.Database{"db": {Name: "db", StorageCluster: "default", NumShards: shards, ReplicaFactor: 2}}),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{"db": {DB: "db", Shards: states}}),
		Nodes:       statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": ns}),
	}
}

// TestWriteAbandonsAttemptsWhoseLeaderMoved: a batch's attempts to a
// leader that never answers (frozen) are cancelled once the published
// state names a new leader, and the batch is written there. One watcher
// serves every shard of the batch.
func TestWriteAbandonsAttemptsWhoseLeaderMoved(t *testing.T) {
	const shards = 4
	frozen, arrived, abandoned := frozenLeader(t)
	var written atomic.Int32
	next := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Contains(t, r.URL.RawQuery, "term=4") // not require: this is the server's goroutine
		written.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(next.Close)
	nodes := map[string]string{"n1": strings.TrimPrefix(frozen.URL, "http://"), "n2": strings.TrimPrefix(next.URL, "http://")}
	pub := newPublisher(ledBy(shards, "n1", 3, nodes))
	d := &Data{State: pub.State, Changed: pub.Changed, Client: &http.Client{}}

	sent, done := writeUntilAllArrive(t, context.Background(), d, shards, arrived)
	require.Zero(t, abandoned.Load())

	pub.publish(ledBy(shards, "n2", 4, nodes))
	require.NoError(t, awaitWrite(t, done, "the write stayed with the frozen leader after the state moved"))
	require.Eventually(t, func() bool { return abandoned.Load() == sent }, 10*time.Second, 5*time.Millisecond,
		"every attempt to the old leader was cancelled")
	require.Equal(t, sent, written.Load(), "and written to the new one")
}

// frozenLeader is a storage node that never answers a write: it counts
// the writes that arrive, and those the broker gives up on.
func frozenLeader(t *testing.T) (srv *httptest.Server, arrived, abandoned *atomic.Int32) {
	arrived, abandoned = new(atomic.Int32), new(atomic.Int32)
	thawed := make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a closed connection only after the body
		arrived.Add(1)
		select {
		case <-r.Context().Done(): // the broker gave up on this request
			abandoned.Add(1)
		case <-thawed:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(thawed) }) // first: a failed test does not hang in Close
	return srv, arrived, abandoned
}

// TestWriteEndsWithItsContext: when the client's request ends, every
// attempt of its batch is abandoned (their contexts are not the request's
// children; the watch ends them).
func TestWriteEndsWithItsContext(t *testing.T) {
	const shards = 4
	frozen, arrived, abandoned := frozenLeader(t)
	pub := newPublisher(ledBy(shards, "n1", 3, map[string]string{"n1": strings.TrimPrefix(frozen.URL, "http://")}))
	d := &Data{State: pub.State, Changed: pub.Changed, Client: &http.Client{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent, done := writeUntilAllArrive(t, ctx, d, shards, arrived)
	cancel()
	require.Error(t, awaitWrite(t, done, "the write outlived its context"))
	require.Eventually(t, func() bool { return abandoned.Load() == sent }, 10*time.Second, 5*time.Millisecond,
		"every attempt was cancelled with the request")

	// An attempt added after the end is cancelled as it is added.
	cfg, err := d.database(pub.State(), "db")
	require.NoError(t, err)
	w := d.watch(ctx, cfg)
	defer w.stop()
	actx, acancel := context.WithCancel(w.base)
	w.add(d.target(pub.State(), cfg, 0), acancel)
	require.ErrorIs(t, actx.Err(), context.Canceled)
}

// writeUntilAllArrive starts writing a batch of six series through d under
// ctx and returns once every shard's attempt (sent: one per shard the
// batch spans, of shards) has arrived at the frozen leader counting
// arrived; done gets the write's result.
func writeUntilAllArrive(t *testing.T, ctx context.Context, d *Data, shards int, arrived *atomic.Int32) (sent int32, done <-chan error) {
	const body = "cpu,h=a v=1 1\ncpu,h=b v=1 1\ncpu,h=c v=1 1\ncpu,h=d v=1 1\ncpu,h=e v=1 1\ncpu,h=f v=1 1"
	sent = shardsOf(t, body, shards)
	require.Greater(t, sent, int32(1), "the batch spans several shards")
	result := make(chan error, 1)
	go func() { result <- d.Write(ctx, "db", "ns", []byte(body)) }()
	require.Eventually(t, func() bool { return arrived.Load() == sent }, 10*time.Second, 5*time.Millisecond,
		"every shard's attempt reaches the frozen leader")
	return sent, result
}

// awaitWrite returns the write's result, failing the test with stuck if
// none comes within 10 s.
func awaitWrite(t *testing.T, done <-chan error, stuck string) error {
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal(stuck)
		return nil
	}
}

// shardsOf is how many shards of numShards the points of body fall in.
func shardsOf(t *testing.T, body string, numShards int) int32 {
	pts, err := lineproto.Parse([]byte(body), "ns", 0)
	require.NoError(t, err)
	var used int32
	for _, g := range splitByShard(pts, numShards) {
		if len(g) > 0 {
			used++
		}
	}
	return used
}

// TestWatchCancelsAnAttemptAddedAfterTheStateMoved: the watcher may have
// looked at the new state before the attempt was added; add itself
// cancels an attempt whose target the current state no longer names.
func TestWatchCancelsAnAttemptAddedAfterTheStateMoved(t *testing.T) {
	nodes := map[string]string{"n1": "127.0.0.1:1", "n2": "127.0.0.1:2"}
	pub := newPublisher(ledBy(2, "n1", 3, nodes))
	d := &Data{State: pub.State, Changed: pub.Changed}
	cfg, err := d.database(pub.State(), "db")
	require.NoError(t, err)
	w := d.watch(context.Background(), cfg)
	defer w.stop()
	stale := d.target(pub.State(), cfg, 0)
	pub.publish(ledBy(2, "n2", 4, nodes))

	ctx, cancel := context.WithCancel(context.Background())
	w.add(stale, cancel)
	require.ErrorIs(t, ctx.Err(), context.Canceled, "an attempt to the old leader is cancelled as it is added")

	fresh := d.target(pub.State(), cfg, 1)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	w.add(fresh, cancel)
	require.NoError(t, ctx.Err(), "an attempt to the leader the state names is not")
	w.remove(1)
}
