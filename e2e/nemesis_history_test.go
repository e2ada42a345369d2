package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// leaderHistory records every leader the master ever published for every
// shard term, from a watch on NS/state/shards/ started before the first
// database exists. etcd may be restarted, or wiped and restored (a new
// cluster whose revisions start again at 1): the recorder notices a new
// cluster id and replays the new cluster from revision 1, so no published
// value is missed. A compaction under a lagging watch is recorded as a gap.
type leaderHistory struct {
	endpoint, prefix string

	mu      sync.Mutex
	leaders map[shardTerm]map[string]leaderSeen
	values  int      // shard-state values read
	gaps    []string // history that could not be read
	errs    []string // undecodable values

	cancel context.CancelFunc
	done   chan struct{}
}

type shardTerm struct {
	db    string
	shard int
	term  int64
}

type leaderSeen struct {
	cluster uint64
	rev     int64
}

func startLeaderHistory(endpoint, prefix string) *leaderHistory {
	ctx, cancel := context.WithCancel(context.Background())
	h := &leaderHistory{endpoint: endpoint, prefix: prefix, leaders: map[shardTerm]map[string]leaderSeen{},
		cancel: cancel, done: make(chan struct{})}
	go h.run(ctx)
	return h
}

func (h *leaderHistory) stop() {
	h.cancel()
	<-h.done
}

func (h *leaderHistory) note(list *[]string, format string, a ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(*list) < 50 {
		*list = append(*list, fmt.Sprintf(format, a...))
	}
}

func (h *leaderHistory) record(cluster uint64, key string, value []byte, rev int64) {
	var st struct {
		Shards []struct {
			ID     int    `json:"id"`
			Leader string `json:"leader"`
			Term   int64  `json:"term"`
		} `json:"shards"`
	}
	if err := json.Unmarshal(value, &st); err != nil {
		h.note(&h.errs, "%s at revision %d of cluster %x: %v", key, rev, cluster, err)
		return
	}
	db := strings.TrimPrefix(key, h.prefix)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.values++
	for _, s := range st.Shards {
		if s.Leader == "" {
			continue
		}
		k := shardTerm{db: db, shard: s.ID, term: s.Term}
		m := h.leaders[k]
		if m == nil {
			m = map[string]leaderSeen{}
			h.leaders[k] = m
		}
		if _, ok := m[s.Leader]; !ok {
			m[s.Leader] = leaderSeen{cluster: cluster, rev: rev}
		}
	}
}

// run follows the history until stopped. Every loop is bounded by ctx.
func (h *leaderHistory) run(ctx context.Context) {
	defer close(h.done)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{h.endpoint}, DialTimeout: 2 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		h.note(&h.gaps, "no etcd client: %v", err)
		return
	}
	defer cli.Close()
	var cluster uint64
	next := int64(1)
	for ctx.Err() == nil {
		id, ok := h.clusterID(ctx, cli)
		if !ok {
			continue
		}
		if id != cluster {
			cluster, next = id, 1
		}
		next = h.follow(ctx, cli, cluster, next)
	}
}

// clusterID asks etcd who it is; false (after a pause) when it does not answer.
func (h *leaderHistory) clusterID(ctx context.Context, cli *clientv3.Client) (uint64, bool) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := cli.Get(cctx, h.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
		return 0, false
	}
	return resp.Header.ClusterId, true
}

// follow watches cluster from revision next until the watch fails or etcd
// turns out to be another cluster, and returns the revision to resume from.
func (h *leaderHistory) follow(ctx context.Context, cli *clientv3.Client, cluster uint64, next int64) int64 {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := cli.Watch(clientv3.WithRequireLeader(wctx), h.prefix, clientv3.WithPrefix(), clientv3.WithRev(next))
	check := time.NewTicker(500 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return next
		case <-check.C:
			// A wiped and restored etcd at the same address: the client
			// resumes the watch at our old revision in the new cluster,
			// which would skip its first revisions. Start over on it.
			if id, ok := h.clusterID(ctx, cli); ok && id != cluster {
				return next
			}
		case resp, ok := <-wch:
			if !ok {
				return next
			}
			if err := resp.Err(); err != nil {
				if errors.Is(err, rpctypes.ErrCompacted) || resp.CompactRevision > 0 {
					h.note(&h.gaps, "cluster %x: revisions %d..%d compacted before they were read", cluster, next, resp.CompactRevision-1)
					return resp.CompactRevision
				}
				return next
			}
			if resp.Header.ClusterId != 0 && resp.Header.ClusterId != cluster {
				return next
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					h.record(cluster, string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision)
				}
				next = max(next, ev.Kv.ModRevision+1)
			}
		}
	}
}

// doubleLeaders lists every shard term that had more than one leader.
func (h *leaderHistory) doubleLeaders() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for k, m := range h.leaders {
		if len(m) < 2 {
			continue
		}
		var who []string
		for id, seen := range m {
			who = append(who, fmt.Sprintf("%s (first at revision %d of etcd cluster %x)", id, seen.rev, seen.cluster))
		}
		sort.Strings(who)
		out = append(out, fmt.Sprintf("database %s shard %d term %d was led by %s", k.db, k.shard, k.term, strings.Join(who, " and ")))
	}
	sort.Strings(out)
	return out
}

func (h *leaderHistory) summary() (values, terms int, gaps, errs []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.values, len(h.leaders), append([]string(nil), h.gaps...), append([]string(nil), h.errs...)
}
