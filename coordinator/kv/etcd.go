package kv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EtcdConfig says how to reach an etcd cluster.
type EtcdConfig struct {
	Endpoints   []string
	DialTimeout time.Duration // default 2s
	// RequestTimeout bounds each unary call made without a deadline; default 3s.
	RequestTimeout     time.Duration
	CACert, Cert, Key  string
	Username, Password string
	// Namespace is the key prefix (e.g. /cairn) this client works under: the
	// cluster probe reads a key inside it, so an etcd user whose role covers
	// only the namespace may probe. Empty probes a key of its own.
	Namespace string
	Logger    *zap.Logger
	// Metrics records every request; nil records nothing.
	Metrics *EtcdMetrics
}

// EtcdStore is a Store backed by an etcd cluster.
type EtcdStore struct {
	cli     *clientv3.Client
	timeout time.Duration
	metrics *EtcdMetrics
	probe   HeaderProbe // one cluster check shared by every watcher of this store
	// probeKey is the (never written) key Header reads.
	probeKey string
	// login: the client logs in with a user and password (see relogin).
	login bool
	// watcher serves Watch when set (else the client's own): a login store
	// replaces it when etcd refuses a watch (see renewWatcher).
	watcher atomic.Pointer[ownWatcher]
	// lease serves Grant, KeepAlive and Revoke: the client's own, or a
	// stream of a LeaseStream view's.
	lease clientv3.Lease
	// view: a LeaseStream view, whose Close ends its lease stream only.
	view bool
}

// The gRPC flow-control windows of every etcd client: what etcd may send
// on one stream (a watch), and on the connection, before the client reads.
const (
	streamWindow = 4 << 20
	connWindow   = 16 << 20
)

// NewEtcdStore connects to etcd. It does not wait for the cluster to answer, so
// a node can start while etcd is down.
func NewEtcdStore(cfg EtcdConfig) (*EtcdStore, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("kv: no etcd endpoints")
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 3 * time.Second
	}
	lg := cfg.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	var tlsCfg *tls.Config
	if cfg.CACert != "" || cfg.Cert != "" {
		info := transport.TLSInfo{TrustedCAFile: cfg.CACert, CertFile: cfg.Cert, KeyFile: cfg.Key}
		c, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("kv: etcd tls: %w", err)
		}
		tlsCfg = c
	}
	ccfg := clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		TLS:                  tlsCfg,
		Logger:               lg.Named("etcd-client").WithOptions(zap.IncreaseLevel(zap.WarnLevel)),
		// gRPC starts a stream's window at 64 KiB and grows it only as
		// its own pings measure the link. A watch that falls behind (a
		// node's process busy with many goroutines, a dead domain's
		// thousands of changes) then gets 64 KiB per round trip of its
		// window updates, and etcd counts it a slow watcher. Wider fixed
		// windows let etcd send a burst without waiting on the reader;
		// they cost memory only while a reader lags.
		DialOptions: []grpc.DialOption{grpc.WithInitialWindowSize(streamWindow), grpc.WithInitialConnWindowSize(connWindow)},
	}
	// clientv3.New logs in with a password before it returns, so it fails
	// while etcd is down, and a node's own embedded member starts after its
	// client. The client is made with a placeholder token instead and logs
	// in at its first call: etcd (with auth on) answers the placeholder
	// "invalid auth token", on which the client logs in with the user and
	// password and retries; with auth off etcd ignores tokens.
	login := cfg.Username != "" && cfg.Password != ""
	if login {
		ccfg.Token = "cairn-login-on-first-call"
	}
	cli, err := clientv3.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("kv: etcd client: %w", err)
	}
	if login {
		// No call has run yet: nothing reads these concurrently.
		cli.Token, cli.Username, cli.Password = "", cfg.Username, cfg.Password
	}
	probeKey := "\x00cairn-cluster-probe"
	if ns := strings.TrimRight(cfg.Namespace, "/"); ns != "" {
		probeKey = ns + "/\x00probe"
	}
	return &EtcdStore{cli: cli, timeout: cfg.RequestTimeout, metrics: cfg.Metrics, probeKey: probeKey, login: login}, nil
}

// relogin makes the client log in again with its user and password. A
// client that logged in while etcd's auth was off holds no token; once an
// operator turns auth on, etcd takes its calls as coming from the user its
// client certificate names (with --client-cert-auth), answering "permission
// denied", which clientv3 does not take as a reason to log in. clientv3
// logs in whenever it opens a gRPC stream, so opening one (a watch of the
// probe key, until etcd confirms it) does it.
func (s *EtcdStore) relogin(ctx context.Context) error {
	w := clientv3.NewWatcher(s.cli)
	defer w.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, ok := <-w.Watch(wctx, s.probeKey, clientv3.WithCreatedNotify())
	if !ok {
		return fmt.Errorf("%w: no watch to log in with", ErrUnavailable)
	}
	return resp.Err()
}

func (s *EtcdStore) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.timeout)
}

// mapErr turns etcd and gRPC errors into the package sentinels.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%w: %w", ErrCompacted, err)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("%w: %w", ErrLeaseNotFound, err)
	case errors.Is(err, rpctypes.ErrNoSpace):
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrAuthFailed),
		errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("%w: %w", ErrAccessDenied, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, rpctypes.ErrNoLeader),
		errors.Is(err, rpctypes.ErrTimeout), errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(err, rpctypes.ErrTooManyRequests):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	return err
}

// mapWriteErr is mapErr for a call that changes etcd. A write that timed out
// or lost its connection may have been proposed and applied after all, so it
// is marked ErrOutcomeUnknown (still matching ErrUnavailable). Only errors
// etcd returns before proposing (no leader, NOSPACE, auth, too large...)
// prove that nothing changed.
func mapWriteErr(err error) error {
	mapped := mapErr(err)
	// Too many requests: etcd refused it before proposing (its apply is
	// too far behind its commits).
	if !errors.Is(mapped, ErrUnavailable) || errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrTooManyRequests) {
		return mapped
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, mapped)
}

func kvFrom(k *mvccpb.KeyValue) KeyValue {
	return KeyValue{Key: string(k.Key), Value: k.Value, CreateRev: k.CreateRevision, ModRev: k.ModRevision, Lease: LeaseID(k.Lease)}
}

// Get implements Store.
func (s *EtcdStore) Get(ctx context.Context, key string) (*KeyValue, error) {
	var resp *clientv3.GetResponse
	if err := s.call(ctx, opGet, func(ctx context.Context) (err error) { resp, err = s.cli.Get(ctx, key); return err }); err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	kvp := kvFrom(resp.Kvs[0])
	return &kvp, nil
}

// maxReadOps is how many keys one GetMany round trip reads (etcd refuses a
// txn of more than --max-txn-ops operations, 128 by default).
const maxReadOps = 100

// GetMany reads keys (nil for an absent one) with the cluster id, in one
// read-only txn per maxReadOps keys, no revision. A caller that needs
// several keys and the cluster id before a fenced write makes one round trip
// instead of one per key. The read is serializable: the member answers
// from what it has applied, without a read index through raft. On a single
// member that is every acknowledged write; a lagging member of a larger
// cluster may answer older values, which the caller's write then finds
// changed (its compares fail) and reads again. Thousands of new leaders'
// linearizable reads at once kept etcd's read loop (which lease renewals
// wait on when its raft loop is late) backed up.
func (s *EtcdStore) GetMany(ctx context.Context, keys []string) ([]*KeyValue, uint64, error) {
	out := make([]*KeyValue, 0, len(keys))
	var cid uint64
	for start := 0; start == 0 || start < len(keys); start += maxReadOps {
		chunk := keys[start:min(len(keys), start+maxReadOps)]
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpGet(k, clientv3.WithSerializable())
		}
		var resp *clientv3.TxnResponse
		if err := s.call(ctx, opGet, func(ctx context.Context) (err error) {
			resp, err = s.cli.Txn(ctx).Then(ops...).Commit()
			return err
		}); err != nil {
			return nil, 0, err
		}
		cid = resp.Header.ClusterId
		if len(resp.Responses) != len(chunk) {
			return nil, 0, fmt.Errorf("%w: etcd answered %d reads for %d keys", ErrUnavailable, len(resp.Responses), len(chunk))
		}
		for _, r := range resp.Responses {
			rr := r.GetResponseRange()
			if rr == nil || len(rr.Kvs) == 0 {
				out = append(out, nil)
				continue
			}
			kvp := kvFrom(rr.Kvs[0])
			out = append(out, &kvp)
		}
	}
	return out, cid, nil
}

// List implements Store. Large prefixes are read in pages at one revision.
func (s *EtcdStore) List(ctx context.Context, prefix string) ([]KeyValue, int64, error) {
	var out []KeyValue
	after := ""
	var rev int64
	for {
		page, r, err := s.ListAt(ctx, prefix, after, rev, 5000)
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = r
		}
		out = append(out, page...)
		if len(page) < 5000 {
			return out, rev, nil
		}
		after = page[len(page)-1].Key
	}
}

// ListAt implements Store.
func (s *EtcdStore) ListAt(ctx context.Context, prefix, after string, rev int64, limit int) ([]KeyValue, int64, error) {
	start := prefix
	if after != "" {
		start = after + "\x00"
	}
	opts := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(prefix)),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	var resp *clientv3.GetResponse
	if err := s.call(ctx, opList, func(ctx context.Context) (err error) { resp, err = s.cli.Get(ctx, start, opts...); return err }); err != nil {
		return nil, 0, err
	}
	out := make([]KeyValue, len(resp.Kvs))
	for i, k := range resp.Kvs {
		out[i] = kvFrom(k)
	}
	return out, resp.Header.Revision, nil
}

// Put implements Store.
func (s *EtcdStore) Put(ctx context.Context, key string, value []byte, lease LeaseID) (int64, error) {
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(clientv3.LeaseID(lease)))
	}
	var resp *clientv3.PutResponse
	if err := s.callWrite(ctx, opPut, func(ctx context.Context) (err error) {
		resp, err = s.cli.Put(ctx, key, string(value), opts...)
		return err
	}); err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// Delete implements Store.
func (s *EtcdStore) Delete(ctx context.Context, key string) (bool, error) {
	var resp *clientv3.DeleteResponse
	if err := s.callWrite(ctx, opDelete, func(ctx context.Context) (err error) { resp, err = s.cli.Delete(ctx, key); return err }); err != nil {
		return false, err
	}
	return resp.Deleted > 0, nil
}

// DeletePrefix implements Store.
func (s *EtcdStore) DeletePrefix(ctx context.Context, prefix string) (int64, error) {
	var resp *clientv3.DeleteResponse
	if err := s.callWrite(ctx, opDeletePrefix, func(ctx context.Context) (err error) {
		resp, err = s.cli.Delete(ctx, prefix, clientv3.WithPrefix())
		return err
	}); err != nil {
		return 0, err
	}
	return resp.Deleted, nil
}

// Txn implements Store.
func (s *EtcdStore) Txn(ctx context.Context, cmps []Cmp, ops []Op) (bool, int64, error) {
	cs := make([]clientv3.Cmp, len(cmps))
	for i, c := range cmps {
		switch c.Kind {
		case CmpCreateRev:
			cs[i] = clientv3.Compare(clientv3.CreateRevision(c.Key), "=", c.Rev)
		case CmpModRev:
			cs[i] = clientv3.Compare(clientv3.ModRevision(c.Key), "=", c.Rev)
		case CmpValue:
			cs[i] = clientv3.Compare(clientv3.Value(c.Key), "=", string(c.Value))
		}
	}
	os := make([]clientv3.Op, len(ops))
	for i, o := range ops {
		if o.Delete {
			os[i] = clientv3.OpDelete(o.Key)
			continue
		}
		var opts []clientv3.OpOption
		if o.Lease != 0 {
			opts = append(opts, clientv3.WithLease(clientv3.LeaseID(o.Lease)))
		}
		os[i] = clientv3.OpPut(o.Key, string(o.Value), opts...)
	}
	var resp *clientv3.TxnResponse
	if err := s.callWrite(ctx, opTxn, func(ctx context.Context) (err error) {
		resp, err = s.cli.Txn(ctx).If(cs...).Then(os...).Commit()
		return err
	}); err != nil {
		return false, 0, err
	}
	return resp.Succeeded, resp.Header.Revision, nil
}

// Grant implements Store.
func (s *EtcdStore) Grant(ctx context.Context, ttl time.Duration) (LeaseID, error) {
	secs := int64((ttl + time.Second - 1) / time.Second)
	var resp *clientv3.LeaseGrantResponse
	if err := s.call(ctx, opGrant, func(ctx context.Context) (err error) { resp, err = s.leases().Grant(ctx, secs); return err }); err != nil {
		return 0, err
	}
	return LeaseID(resp.ID), nil
}

// KeepAlive implements Store.
func (s *EtcdStore) KeepAlive(ctx context.Context, id LeaseID) (<-chan struct{}, error) {
	ch, err := s.leases().KeepAlive(ctx, clientv3.LeaseID(id))
	if err != nil {
		err = mapErr(err)
		s.metrics.observe(opKeepAlive, 0, err)
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Until the lease is lost. Each renewal's answer tells the cluster
		// checks that etcd answers, with its cluster id and revision.
		for resp := range ch {
			if resp.ResponseHeader != nil {
				s.probe.Heard(resp.ClusterId, resp.Revision)
			}
		}
	}()
	return done, nil
}

// Revoke implements Store.
func (s *EtcdStore) Revoke(ctx context.Context, id LeaseID) error {
	return s.call(ctx, opRevoke, func(ctx context.Context) error { _, err := s.leases().Revoke(ctx, clientv3.LeaseID(id)); return err })
}

// Watch implements Store. It requires a leader so a partitioned member does not
// leave the watcher silently stale.
func (s *EtcdStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan RawWatchResponse {
	out := make(chan RawWatchResponse, 16)
	wctx := clientv3.WithRequireLeader(ctx)
	w, own := s.currentWatcher()
	wch := w.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(fromRev),
		clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	go func() {
		defer close(out)
		for resp := range wch {
			var r RawWatchResponse
			if err := resp.Err(); err != nil {
				if resp.CompactRevision != 0 {
					err = fmt.Errorf("%w: compacted at %d", ErrCompacted, resp.CompactRevision)
				} else {
					// etcd cancels a refused watch with its error as text
					// under another code, which mapErr cannot tell.
					if s.login && strings.Contains(err.Error(), rpctypes.ErrPermissionDenied.Error()) {
						s.renewWatcher(own)
					}
					err = mapErr(err)
					if !errors.Is(err, ErrCompacted) {
						err = fmt.Errorf("%w: %w", ErrUnavailable, err)
					}
				}
				r.Err = err
				if ctx.Err() == nil && !errors.Is(err, ErrCompacted) { // compaction only means re-list
					s.metrics.observe(opWatch, 0, err)
				}
				select {
				case out <- r:
				case <-ctx.Done():
				}
				return
			}
			r.Rev = resp.Header.Revision
			r.Events = make([]RawEvent, len(resp.Events))
			for i, ev := range resp.Events {
				e := RawEvent{KV: kvFrom(ev.Kv)}
				if ev.Type == clientv3.EventTypeDelete {
					e.Type = EventDelete
				}
				r.Events[i] = e
			}
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
		}
		if ctx.Err() == nil {
			select {
			case out <- RawWatchResponse{Err: fmt.Errorf("%w: watch channel closed", ErrUnavailable)}:
			case <-ctx.Done():
			}
		}
	}()
	return out
}

// Compact implements Store.
func (s *EtcdStore) Compact(ctx context.Context, rev int64) error {
	return s.call(ctx, opCompact, func(ctx context.Context) error {
		_, err := s.cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
		return err
	})
}

// ClusterID implements Store.
func (s *EtcdStore) ClusterID(ctx context.Context) (uint64, error) {
	id, _, err := s.Header(ctx)
	return id, err
}

// Header implements Store.
func (s *EtcdStore) Header(ctx context.Context) (uint64, int64, error) {
	var resp *clientv3.GetResponse
	if err := s.call(ctx, opHeader, func(ctx context.Context) (err error) {
		resp, err = s.cli.Get(ctx, s.probeKey, clientv3.WithCountOnly())
		return err
	}); err != nil {
		return 0, 0, err
	}
	return resp.Header.ClusterId, resp.Header.Revision, nil
}

// Alarms lists the alarms raised in the etcd cluster ("NOSPACE",
// "CORRUPT"), one entry per kind whatever the number of members raising it.
// It reads them from a member's status, which the member answers from its
// own copy of the alarm list: etcd's alarm API passes every request, a
// listing too, through raft (a log entry and an fsync on every member), and
// every node asks every few seconds. The status is asked over the client's
// own connection (any member holds the whole list): clientv3's Status dials
// a new connection to the endpoint named on each call, which with sixty
// nodes was a dozen TCP and HTTP/2 handshakes a second at an idle etcd.
func (s *EtcdStore) Alarms(ctx context.Context) ([]string, error) {
	var resp *etcdserverpb.StatusResponse
	if err := s.call(ctx, opAlarms, func(ctx context.Context) (err error) {
		resp, err = etcdserverpb.NewMaintenanceClient(s.cli.ActiveConnection()).Status(ctx, &etcdserverpb.StatusRequest{})
		return err
	}); err != nil {
		return nil, err
	}
	return alarmsOf(resp.Errors), nil
}

// alarmRE finds an alarm in a status error string: an AlarmMember in
// protobuf text form ("memberID:1 alarm:NOSPACE").
var alarmRE = regexp.MustCompile(`\balarm:\s*([A-Z_]+)`)

// alarmsOf are the distinct alarm kinds named in a member's status errors.
func alarmsOf(errs []string) []string {
	var out []string
	for _, e := range errs {
		for _, m := range alarmRE.FindAllStringSubmatch(e, -1) {
			if name := m[1]; name != etcdserverpb.AlarmType_NONE.String() && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// SharedHeader is Header shared by every watcher of this store: a probe, or
// a lease renewal's answer, younger than maxAge is answered from memory (see
// HeaderProbe).
func (s *EtcdStore) SharedHeader(ctx context.Context, maxAge time.Duration) (ClusterHeader, error) {
	return s.probe.Get(ctx, maxAge, s.Header)
}

// Close implements Store.
func (s *EtcdStore) Close() error {
	if w := s.watcher.Load(); w != nil {
		_ = w.Close()
	}
	if s.view {
		return s.lease.Close()
	}
	return s.cli.Close()
}

// ownWatcher is a watcher (a gRPC watch stream) a store made itself.
type ownWatcher struct{ clientv3.Watcher }

func (s *EtcdStore) currentWatcher() (clientv3.Watcher, *ownWatcher) {
	if w := s.watcher.Load(); w != nil {
		return w.Watcher, w
	}
	return s.cli.Watcher, nil
}

// renewWatcher replaces the watcher old with a new one. A watch stream
// carries the token its client held when the stream opened: one opened
// while etcd's auth was off has none, and once auth is on etcd refuses
// every watch started on it (with --client-cert-auth, as the user its
// certificate names). A new stream logs in as it opens (see relogin).
func (s *EtcdStore) renewWatcher(old *ownWatcher) {
	nw := &ownWatcher{clientv3.NewWatcher(s.cli)}
	if !s.watcher.CompareAndSwap(old, nw) {
		_ = nw.Close() // another watch renewed it first
		return
	}
	if old != nil {
		_ = old.Close() // its other watches end and are started again on nw
	}
}

func (s *EtcdStore) leases() clientv3.Lease {
	if s.lease != nil {
		return s.lease
	}
	return s.cli
}

// LeaseStream returns a store on s's connection whose leases (grant,
// keep-alive, revoke) go through a keep-alive stream of its own; everything
// else is s's (but for its own cluster probe). etcd renews the leases of one stream one after the other,
// and each renewal waits for a read index whenever its raft loop is late
// (a loaded server): the last of many leases sharing one stream could wait
// past its TTL. Several registrations of one process (`cairn simulate
// cluster`'s agents) each take one. Close ends that stream only; close s
// after its views.
func (s *EtcdStore) LeaseStream() *EtcdStore {
	return &EtcdStore{cli: s.cli, timeout: s.timeout, metrics: s.metrics, lease: clientv3.NewLease(s.cli), view: true, probeKey: s.probeKey, login: s.login}
}
