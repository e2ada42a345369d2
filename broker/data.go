// Package broker is the data path: it hashes series to shards, routes
// writes to each shard's leader at its published term and fans queries out,
// all from the local state copy.
package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/internal/gopool"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
)

// Data is the broker's data plane: it hashes series to shards, sends each
// shard's points to its leader at the published term, retries on a stale
// term or a dead leader once the state moves on, and fans queries out.
type Data struct {
	State   func() *statemachine.State
	Changed func() <-chan struct{} // a fresh subscription to state changes
	Client  *http.Client
	// WriteTimeout bounds how long a write waits for its shards, retries
	// and attempts in flight included (--write-timeout; default
	// DefaultWriteTimeout): past it the write answers 503 with the last
	// cause, while a client still listens.
	WriteTimeout time.Duration
	// Self and Local short-circuit writes and selects to shards led by this
	// very process (a node with the storage role): no HTTP, no re-encoding.
	// Local is nil without that role.
	Self  string
	Local LocalShards
	Now   func() time.Time
	// MaxPoints bounds the points of one write batch (0: no bound): past it
	// the batch is refused with models.ErrTooLarge before it is decoded in
	// full.
	MaxPoints int
	// LineLimits bound each line of a write; a line over one is dropped
	// (a partial write), not the batch.
	LineLimits lineproto.Limits
	// QueryMaxSeries and QueryMaxPoints bound one query's answer over all
	// shards (0: no bound); each shard stops reading once over them.
	QueryMaxSeries, QueryMaxPoints int
	// Metrics records writes and queries; nil records nothing.
	Metrics *Metrics
}

// LocalShards is the storage role of the broker's own process (storage.Host
// implements it). Its errors wrap the models sentinels the internal API
// answers with.
type LocalShards interface {
	// Write appends points to a shard this process leads at term.
	Write(ctx context.Context, db string, shard int, term int64, points []lineproto.Point) error
	// Prepare does ahead the first work of a local write of points and
	// returns that write, which the first attempt calls instead of Write
	// (a retry calls Write). It runs for each local shard of a batch in the
	// goroutine that split the batch, just before the shard's own
	// goroutine starts, while the points are in its caches.
	Prepare(points []lineproto.Point) PreparedWrite
	// Delete logs a delete on a shard this process leads at term.
	Delete(ctx context.Context, db string, shard int, term int64, d *wire.Delete) error
	// Select evaluates an InfluxQL shard request on a shard this process
	// leads.
	Select(ctx context.Context, db string, shard int, req *query.ShardRequest) (*query.ShardResult, error)
}

// DefaultWriteTimeout is WriteTimeout's default: under the 5 s timeouts of
// Telegraf and the Influx Go clients, so they read the cause instead of
// giving up with "context deadline exceeded".
const DefaultWriteTimeout = 4 * time.Second

// errWriteTimeout is the cause of a batch's context ended by WriteTimeout.
var errWriteTimeout = errors.New("write timeout")

type target struct {
	shard   int
	leader  string
	address string
	term    int64
	online  bool
	from    *statemachine.State // the state it was read from
}

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{models.ErrBadInput}, a...)...)
}

func (d *Data) database(st *statemachine.State, db string) (models.Database, error) {
	if db == "" {
		return models.Database{}, bad("missing db parameter")
	}
	cfg, ok := st.Databases.Get(db)
	if !ok {
		return cfg, fmt.Errorf("%w: database %q", models.ErrNotFound, db)
	}
	return cfg, nil
}

func (d *Data) target(st *statemachine.State, cfg models.Database, shard int) target {
	t := target{shard: shard, from: st}
	s, ok := st.ShardState(cfg.Name, shard)
	if !ok {
		return t
	}
	t.leader, t.term = s.Leader, s.Term
	if n, live := st.Nodes.At(cfg.StorageCluster).Get(s.Leader); live && s.Status == models.StatusOnline {
		t.address, t.online = n.NodeAddress, true
	}
	return t
}

// Route serves GET /route.
func (d *Data) Route(db, series string) (models.RouteView, error) {
	st := d.State()
	cfg, err := d.database(st, db)
	if err != nil {
		return models.RouteView{}, err
	}
	if series == "" {
		return models.RouteView{}, bad("missing series parameter")
	}
	key, err := routeKey(series)
	if err != nil {
		return models.RouteView{}, err
	}
	t := d.target(st, cfg, lineproto.ShardOf(key, cfg.NumShards))
	status := models.StatusOnline
	if !t.online {
		status = models.StatusOffline
	}
	return models.RouteView{Shard: t.shard, Leader: models.LeaderRef{NodeID: t.leader, Address: t.address}, Term: t.term, Status: status}, nil
}

// routeKey turns the series a client names (line protocol's
// "metric,tag=value,...", with "#field" optionally; the field "value" when
// none) into the series key writes are routed by: tags sorted, field
// appended. Hashing the text as given named another shard than the one
// holding the series.
func routeKey(series string) (string, error) {
	field := "value"
	for i := 0; i < len(series); i++ {
		if series[i] == '\\' {
			i++
		} else if series[i] == '#' {
			series, field = series[:i], series[i+1:]
			break
		}
	}
	points, err := lineproto.Parse([]byte(series+" f=0 0"), "ns", 0)
	if err != nil || len(points) != 1 || field == "" {
		return "", bad("series %q is not metric,tag=value,... (optionally #field)", series)
	}
	p := points[0]
	return string(lineproto.AppendSeriesKey(nil, p.Metric, p.Tags, field)), nil
}

// write is Write (metrics.go) without the metrics: nil (204) means every
// shard's batch is durable on its in-sync replicas; a
// *models.PartialWriteError that every good line's is, and names the lines
// dropped. It returns the points written.
func (d *Data) write(ctx context.Context, db, precision string, body []byte) (n int, err error) {
	st := d.State()
	cfg, err := d.database(st, db)
	if err != nil {
		return 0, err
	}
	release, err := takeCPUSlot(ctx)
	if err != nil {
		return 0, err
	}
	defer release()
	at := d.clock()
	// Given: the caller's body does not change before this returns, nor
	// after unless it returned nil (Write). Into: the points and their tags
	// are an earlier write's memory, given back on the same condition.
	into := parseBuffers.Get().(*lineproto.Buffers)
	batch, err := lineproto.ParseBatch(body, lineproto.Options{Precision: precision, Now: at.UnixNano(),
		MaxPoints: d.MaxPoints, Limits: d.LineLimits, Check: acceptWindow(cfg, at), Given: true, Into: into})
	defer func() {
		if err == nil {
			releaseParseBuffers(into)
		}
	}()
	if errors.Is(err, lineproto.ErrTooManyPoints) {
		return 0, fmt.Errorf("%w: the batch holds more than %d points (--write-max-points); send it in smaller batches", models.ErrTooLarge, d.MaxPoints)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %w", models.ErrBadInput, err)
	}
	n, err = d.writePoints(ctx, st, cfg, batch.Points, release)
	var pw *models.PartialWriteError
	switch {
	case batch.First == nil:
	case err == nil:
		// Only now: the good lines are as durable as a 204's.
		err = &models.PartialWriteError{Reason: batch.First.Reason(), Dropped: batch.Dropped}
	case errors.As(err, &pw):
		// Shards refused points too (field type conflicts): the parser's
		// first bad line comes first.
		err = &models.PartialWriteError{Reason: batch.First.Reason(), Dropped: batch.Dropped + pw.Dropped}
	}
	return n, err
}

// parseBuffers hold the points and tags of writes that ended: with many
// new series (each line's tags its own) they were half of the bytes the
// node allocated, and its collections the writes' tail (issue 21).
var parseBuffers = sync.Pool{New: func() any { return new(lineproto.Buffers) }}

// maxPooledParse bounds the memory of a lineproto.Buffers kept for the next
// write (a 5,000-line batch of two tags holds about 0.9 MiB).
const maxPooledParse = 4 << 20

// releaseParseBuffers gives b back for a later write's parse. Only a write
// that returned nil releases its buffers: its shards' entries are then
// committed, and nothing (a retry, a wait that timed out, a remote
// attempt) holds its points.
func releaseParseBuffers(b *lineproto.Buffers) {
	if b.Bytes() > maxPooledParse {
		return
	}
	b.Reset()
	parseBuffers.Put(b)
}

// cpuSlots bounds the writes parsing, splitting and preparing their batches
// at once to the processors. With 32 senders on 2 cores every write's
// handler was runnable at once, each taking its share of the CPU for a
// batch's whole parse, and the shards' committers and the log's writer,
// woken once a group was durable, queued behind all of them: the tail of
// the writes was that wait (issue 21; p99 at +160k series 229 ms against
// 269 ms, median of 3 alternated runs). A write waiting for a slot takes no
// processor; one holding it lets it go before waiting for its shards.
var cpuSlots = make(chan struct{}, runtime.GOMAXPROCS(0))

// takeCPUSlot waits for a slot of cpuSlots (or ctx's end); release gives
// it back, once however often it is called.
func takeCPUSlot(ctx context.Context) (release func(), err error) {
	select {
	case cpuSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	var once sync.Once
	return func() { once.Do(func() { <-cpuSlots }) }, nil
}

// writePoints writes the points of a batch to their shards; nil: every
// shard's are durable on its in-sync replicas. release (if not nil) is
// called once every shard's write has started.
func (d *Data) writePoints(ctx context.Context, st *statemachine.State, cfg models.Database, points []lineproto.Point, release func()) (int, error) {
	if len(points) == 0 {
		return 0, nil
	}
	groups := splitByShard(points, cfg.NumShards)
	batches := make([]batch, len(groups))
	for shard, pts := range groups {
		batches[shard].pts = pts
	}
	return len(points), d.sendToShards(ctx, st, cfg, batches, release)
}

// batch is what one shard is sent: points, or a delete.
type batch struct {
	pts []lineproto.Point
	del *wire.Delete
}

func (b batch) empty() bool { return len(b.pts) == 0 && b.del == nil }

// sendToShards sends each shard its batch (by shard; empty ones are
// skipped) within the write timeout; nil: every batch is durable on its
// shard's in-sync replicas. A shard this process leads is queued in its
// log by this goroutine, which then waits for each such shard in turn; the
// others are written each from a goroutine of its own, as is a local
// shard's retry.
func (d *Data) sendToShards(ctx context.Context, st *statemachine.State, cfg models.Database, batches []batch, release func()) error {
	ctx, cancel := context.WithTimeoutCause(ctx, d.writeTimeout(), errWriteTimeout)
	defer cancel()
	w := d.watch(ctx, cfg)
	defer w.stop()
	var wg sync.WaitGroup
	errs := make(chan error, len(batches))
	starter, _ := d.Local.(localStarter)
	var local []startedWrite
	for shard, b := range batches {
		if b.empty() {
			continue
		}
		t := d.target(st, cfg, shard)
		isLocal := b.del == nil && d.Local != nil && t.online && t.leader == d.Self
		if isLocal && starter != nil {
			// Queued here: 8 shards handed to 8 goroutines, each woken
			// again once its group was durable, kept the committers
			// waiting for a processor behind them (issue 21).
			finish, err := starter.Start(cfg.Name, shard, t.term, b.pts)
			local = append(local, startedWrite{t: t, b: b, finish: finish, err: err})
			continue
		}
		// Each shard starts once prepared: the first are written while
		// the next are prepared.
		var prepared PreparedWrite
		if isLocal {
			prepared = d.Local.Prepare(b.pts)
		}
		wg.Add(1)
		shardWriters.Go(func() {
			defer wg.Done()
			if err := d.writeShard(ctx, w, cfg, t, b, prepared); err != nil {
				errs <- err
			}
		})
	}
	if release != nil {
		release()
	}
	for _, s := range local {
		err := s.err
		if err == nil {
			err = d.awaitLocal(w, s)
		}
		if err == nil {
			continue
		}
		// The first attempt's answer goes through writeShard, which
		// retries what a failover or a moment can mend.
		wg.Add(1)
		shardWriters.Go(func() {
			defer wg.Done()
			first := func(context.Context, string, int, int64) error { return err }
			if err := d.writeShard(ctx, w, cfg, s.t, s.b, first); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return firstError(errs)
}

// localStarter is a LocalShards that can queue a local write in the
// caller's goroutine (storage.Host.Start): finish waits for it.
type localStarter interface {
	Start(db string, shard int, term int64, points []lineproto.Point) (finish func(ctx context.Context) error, err error)
}

// startedWrite is a local shard's write queued by sendToShards.
type startedWrite struct {
	t      target
	b      batch
	finish func(ctx context.Context) error // nil when err is not
	err    error                           // Start's
}

// awaitLocal waits for s's write as attempt would: abandoned once the
// published state names another leader or term for the shard.
func (d *Data) awaitLocal(w *watch, s startedWrite) error {
	actx, cancel := context.WithCancel(w.base)
	defer cancel()
	w.add(s.t, cancel)
	defer w.remove(s.t.shard)
	return s.finish(actx)
}

// firstError is nil when every shard succeeded; else the first failure,
// or, when every shard that refused something stored the rest (a
// *models.PartialWriteError each), one partial write counting what they
// all dropped, named by the first.
func firstError(errs <-chan error) error {
	var partial *models.PartialWriteError
	for err := range errs {
		var pw *models.PartialWriteError
		if !errors.As(err, &pw) {
			return err
		}
		if partial == nil {
			partial = &models.PartialWriteError{Reason: pw.Reason}
		}
		partial.Dropped += pw.Dropped
	}
	if partial == nil {
		return nil
	}
	return partial
}

// shardWriters run the writes of a batch to its shards, one goroutine each,
// kept between batches (see gopool).
var shardWriters = gopool.New(256)

// splitByShard groups points by the shard of their series, keeping their
// order within a shard: one slice per shard, cut from points itself, which
// it reorders in place (a copy of the batch was a fifth of the bytes a write
// allocated), with every series key built in one reused buffer.
func splitByShard(points []lineproto.Point, numShards int) [][]lineproto.Point {
	numShards = max(numShards, 1)
	dest := make([]int32, len(points))
	counts := make([]int, numShards)
	for i := range points {
		p := &points[i]
		s := lineproto.ShardOfSeries(p.Metric, p.Tags, p.Field, numShards)
		dest[i] = int32(s)
		counts[s]++
	}
	groups := make([][]lineproto.Point, numShards)
	next := make([]int32, numShards) // the next place of each shard's points
	at := 0
	for s, n := range counts {
		groups[s] = points[at : at+n : at+n]
		next[s] = int32(at)
		at += n
	}
	for i, s := range dest {
		dest[i] = next[s]
		next[s]++
	}
	// Each swap puts one point where it belongs, so this ends after fewer
	// than len(points) swaps.
	for i := range points {
		for int(dest[i]) != i {
			j := dest[i]
			points[i], points[j] = points[j], points[i]
			dest[i], dest[j] = dest[j], dest[i]
		}
	}
	return groups
}

func (d *Data) writeTimeout() time.Duration {
	if d.WriteTimeout > 0 {
		return d.WriteTimeout
	}
	return DefaultWriteTimeout
}

// writeShard sends one shard's points to its leader (first: as the batch
// found it), retrying while the state catches up with a failover (stale
// term, leader gone, in-sync set shrinking) until ctx ends (WriteTimeout).
// A shard none of whose replicas is live fails at once: no failover can
// come before a node returns.
func (d *Data) writeShard(ctx context.Context, w *watch, cfg models.Database, first target, b batch, prepared PreparedWrite) error {
	shard := first.shard
	changed := d.Changed()
	var lastErr error
	for attempt := 0; ; attempt++ {
		t := first
		st := d.State()
		if attempt > 0 || st != t.from {
			t = d.target(st, cfg, shard)
		}
		if t.online {
			err := d.attempt(ctx, w, cfg, t, b, prepared)
			prepared = nil // used once
			var peer *client.PeerError
			var pw *models.PartialWriteError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &pw):
				// The leader stored the shard's other points.
				return pw
			case ctx.Err() != nil && context.Cause(ctx) == errWriteTimeout:
				return d.timedOut(cfg, shard, fmt.Errorf("leader %s did not answer in time", t.leader))
			case errors.Is(err, models.ErrBadInput):
				// Final: the leader refused the points themselves.
				return fmt.Errorf("%w: shard %d: %s", models.ErrBadInput, shard, err)
			case errors.Is(err, models.ErrNotEnoughISR):
				// Final for this batch: the leader itself counted too few
				// in-sync replicas, and retrying cannot add any.
				return fmt.Errorf("%w: %s", models.ErrUnavailable, err)
			case errors.Is(err, models.ErrInsufficientStorage) && noWritableReplica(st, cfg, shard, t.leader):
				// Final: the leader's disk refuses writes and no replica
				// that takes them can lead instead.
				return fmt.Errorf("%w: shard %d of %q: %s", models.ErrInsufficientStorage, shard, cfg.Name, err)
			case errors.As(err, &peer):
				// The leader's answer is about the broker's request, not the
				// client's: its code is not passed on (%s).
				lastErr = fmt.Errorf("%w: shard %d: leader %s answered %d: %s", models.ErrUnavailable, shard, t.leader, peer.Status, err)
			default:
				lastErr = fmt.Errorf("%w: shard %d leader %s unreachable: %w", models.ErrUnavailable, shard, t.leader, err)
			}
		} else {
			if down, none := noLiveReplica(st, cfg, shard); none {
				return fmt.Errorf("%w: shard %d of %q has no live replica (%s down): it can take writes only once one of them is back",
					models.ErrUnavailable, shard, cfg.Name, strings.Join(down, ", "))
			}
			lastErr = fmt.Errorf("%w: shard %d of %q is offline (no live leader)", models.ErrUnavailable, shard, cfg.Name)
		}
		// Wait for the state to move (a new leader or term), or a short
		// back-off in case the leader just needs a moment.
		wait := time.NewTimer(min(time.Duration(attempt+1)*50*time.Millisecond, 500*time.Millisecond))
		select {
		case <-ctx.Done():
			wait.Stop()
			if context.Cause(ctx) == errWriteTimeout {
				return d.timedOut(cfg, shard, lastErr)
			}
			return lastErr
		case <-changed:
			changed = d.Changed()
		case <-wait.C:
		}
		wait.Stop()
	}
}

// timedOut is the error of a shard write that WriteTimeout ended, with its
// last cause.
func (d *Data) timedOut(cfg models.Database, shard int, cause error) error {
	return fmt.Errorf("%w: shard %d of %q: no write within --write-timeout %s: %s",
		models.ErrUnavailable, shard, cfg.Name, d.writeTimeout(), cause)
}

// noLiveReplica says whether shard has an assignment none of whose replicas
// is a live node of its cluster, and names them.
func noLiveReplica(st *statemachine.State, cfg models.Database, shard int) ([]string, bool) {
	a, ok := st.Assignments.Get(cfg.Name)
	if !ok {
		return nil, false
	}
	nodes := st.Nodes.At(cfg.StorageCluster)
	for _, s := range a.Shards {
		if s.ID != shard || len(s.Replicas) == 0 {
			continue
		}
		for _, r := range s.Replicas {
			if _, live := nodes.Get(r); live {
				return nil, false
			}
		}
		return s.Replicas, true
	}
	return nil, false
}

// PreparedWrite is a local write of points prepared ahead (LocalShards.Prepare):
// it writes them to a shard this process leads at term, once.
type PreparedWrite = func(ctx context.Context, db string, shard int, term int64) error

// attempt sends one batch to t (nil: durable), abandoning it as soon as the published state
// names another leader or term for the shard (w watches): a frozen or
// partitioned leader must not hold a write hostage.
func (d *Data) attempt(ctx context.Context, w *watch, cfg models.Database, t target, b batch, prepared PreparedWrite) error {
	actx, cancel := context.WithCancel(w.base) // ctx's end cancels it through w
	defer cancel()
	w.add(t, cancel)
	defer w.remove(t.shard)
	shard := client.Shard{Peer: client.Peer{ID: t.leader, Address: t.address}, DB: cfg.Name, Shard: t.shard}
	if b.del != nil && (d.Local == nil || t.leader != d.Self) {
		return d.peers().Delete(actx, shard, t.term, b.del)
	}
	if d.Local != nil && t.leader == d.Self {
		write := func() error { return d.Local.Write(actx, cfg.Name, t.shard, t.term, b.pts) }
		switch {
		case b.del != nil:
			write = func() error { return d.Local.Delete(actx, cfg.Name, t.shard, t.term, b.del) }
		case prepared != nil:
			write = func() error { return prepared(actx, cfg.Name, t.shard, t.term) }
		}
		if err := write(); err != nil {
			status, _ := models.StatusOf(err)
			return &client.PeerError{Status: status, Err: err}
		}
		return nil
	}
	return d.peers().Write(actx, shard, t.term, b.pts)
}

// A watch abandons the attempts of one batch whose shard's leader or term
// the published state no longer names, and all of them when the batch's
// context ends. One goroutine watches for the whole batch: one per attempt
// was 4 % of a 32-shard write's CPU, a third of what it cost over 8 shards
// (BENCHMARKS.md). Attempts' contexts derive from
// base, which carries the batch context's values but not its end: each
// child of a request's context is registered with it (a lock and a map
// insert and delete per shard), while base's children cost nothing of the
// kind, and one callback on the batch's context ends them all.
type watch struct {
	d       *Data
	cfg     models.Database
	ctx     context.Context // the batch's
	base    context.Context
	done    chan struct{}
	stopEnd func() bool

	mu       sync.Mutex
	attempts []watched // by shard; cancel nil: none
}

type watched struct {
	t      target
	cancel context.CancelFunc
}

// watch starts watching for a batch of cfg written under ctx; stop ends it.
func (d *Data) watch(ctx context.Context, cfg models.Database) *watch {
	w := &watch{d: d, cfg: cfg, ctx: ctx, base: context.WithoutCancel(ctx), done: make(chan struct{}),
		attempts: make([]watched, max(cfg.NumShards, 1))}
	w.stopEnd = context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for shard, a := range w.attempts {
			if a.cancel != nil {
				a.cancel()
				w.attempts[shard] = watched{}
			}
		}
	})
	ch := d.Changed()
	shardWriters.Go(func() {
		for {
			select {
			case <-w.done:
				return
			case <-ch:
			}
			// Subscribe before reading the state: a change after the read
			// closes ch.
			ch = d.Changed()
			w.mu.Lock()
			st := d.State()
			for shard, a := range w.attempts {
				if a.cancel != nil && w.moved(st, a.t) {
					a.cancel()
					w.attempts[shard] = watched{}
				}
			}
			w.mu.Unlock()
		}
	})
	return w
}

func (w *watch) stop() {
	w.stopEnd()
	close(w.done)
}

// moved says whether st no longer names t's leader and term, online.
func (w *watch) moved(st *statemachine.State, t target) bool {
	n := w.d.target(st, w.cfg, t.shard)
	return n.leader != t.leader || n.term != t.term || !n.online
}

// add watches an attempt to t, cancelled now if the batch's context ended
// or the state moved since t was read (the watcher may have looked before
// it was added).
func (w *watch) add(t target, cancel context.CancelFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.d.State(); w.ctx.Err() != nil || st != t.from && w.moved(st, t) {
		cancel()
		return
	}
	w.attempts[t.shard] = watched{t, cancel}
}

func (w *watch) remove(shard int) {
	w.mu.Lock()
	w.attempts[shard] = watched{}
	w.mu.Unlock()
}

// peers is the client of the storage nodes' internal API over Client.
func (d *Data) peers() *client.Client { return client.New(d.Client) }

// query implements Query (metrics.go): every shard leader answers for its series. The
// answer is {"series":[...]} with the shards' series in shard order (each
// shard's sorted by series), relayed without decoding: a query can return
// millions of points.
func (d *Data) query(ctx context.Context, q models.Query) (json.RawMessage, error) {
	st := d.State()
	cfg, err := d.database(st, q.DB)
	if err != nil {
		return nil, err
	}
	if q.Metric == "" {
		return nil, bad("missing metric parameter")
	}
	if q.End < q.Start {
		return nil, bad("end %d is before start %d", q.End, q.Start)
	}
	if from, ok := retainedFrom(cfg, d.clock()); ok && q.Start < from {
		q.Start = from
	}
	if q.End < q.Start {
		return json.RawMessage(`{"series":[]}`), nil // all of it past the retention
	}
	req := client.QueryRequest{Metric: q.Metric, Start: q.Start, End: q.End, Tags: q.Tags,
		MaxSeries: d.QueryMaxSeries, MaxPoints: d.QueryMaxPoints}
	// Every shard answers with its counts in headers before its body is
	// read: the sum is checked against the limits first, so the broker never
	// buffers an answer over them.
	answers := make([]*client.QueryAnswer, cfg.NumShards)
	errs := make([]error, cfg.NumShards)
	var wg sync.WaitGroup
	for shard := 0; shard < cfg.NumShards; shard++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[shard], errs[shard] = d.openShardQuery(ctx, st, cfg, shard, req)
		}()
	}
	wg.Wait()
	defer func() {
		for _, resp := range answers {
			if resp != nil {
				resp.Body.Close()
			}
		}
	}()
	for _, err := range errs {
		if errors.Is(err, models.ErrTooLarge) { // one shard over is the whole answer over
			return nil, fmt.Errorf("%w (--query-max-series, --query-max-points); narrow the query with tag=key:value filters or a shorter start..end", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var series, points int
	for _, a := range answers {
		series, points = series+a.Series, points+a.Points
	}
	if (d.QueryMaxSeries > 0 && series > d.QueryMaxSeries) || (d.QueryMaxPoints > 0 && points > d.QueryMaxPoints) {
		return nil, d.tooLarge()
	}
	parts := make([][]byte, cfg.NumShards)
	for shard, resp := range answers {
		if parts[shard], err = readShardAnswer(shard, resp); err != nil {
			return nil, err
		}
	}
	out := append(make([]byte, 0, 64), `{"series":[`...)
	first := true
	for _, p := range parts {
		inner := bytes.TrimSpace(p)
		inner = bytes.TrimSuffix(bytes.TrimPrefix(inner, []byte("[")), []byte("]"))
		if len(bytes.TrimSpace(inner)) == 0 {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		out = append(out, inner...)
		first = false
	}
	return json.RawMessage(append(out, "]}"...)), nil
}

// tooLarge is the error of a query over its limits, naming them and how to
// narrow the query.
func (d *Data) tooLarge() error {
	return fmt.Errorf("%w: the query matches more than %d series or %d points (--query-max-series, --query-max-points); narrow it with tag=key:value filters or a shorter start..end",
		models.ErrTooLarge, d.QueryMaxSeries, d.QueryMaxPoints)
}

// openShardQuery sends one shard's query to its leader and returns the answer
// with its body unread.
func (d *Data) openShardQuery(ctx context.Context, st *statemachine.State, cfg models.Database, shard int, req client.QueryRequest) (*client.QueryAnswer, error) {
	s, err := d.leaderOf(d.target(st, cfg, shard), cfg)
	if err != nil {
		return nil, err
	}
	a, err := d.peers().Query(ctx, s, req)
	var peer *client.PeerError
	switch {
	case err == nil:
		return a, nil
	case errors.Is(err, models.ErrTooLarge):
		// Over the limits is the client's to fix (narrow the query).
		return nil, fmt.Errorf("%w: shard %d: %w", models.ErrTooLarge, shard, err)
	case errors.As(err, &peer), errors.Is(err, client.ErrBadAnswer):
		// Any other refusal is the cluster's, and its code is not passed on.
		return nil, fmt.Errorf("%w: shard %d: %s", models.ErrUnavailable, shard, err)
	}
	return nil, fmt.Errorf("%w: shard %d leader unreachable: %w", models.ErrUnavailable, shard, err)
}

func readShardAnswer(shard int, a *client.QueryAnswer) ([]byte, error) {
	body, err := io.ReadAll(a.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: shard %d answer: %w", models.ErrUnavailable, shard, err)
	}
	if !json.Valid(body) {
		return nil, fmt.Errorf("%w: shard %d answered invalid JSON", models.ErrUnavailable, shard)
	}
	return body, nil
}
