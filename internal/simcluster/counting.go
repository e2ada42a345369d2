package simcluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
)

// countingStore is an agents' etcd client that counts its requests by kind
// (operation and key family), for the progress lines: where the agents'
// etcd round trips go.
type countingStore struct {
	*kv.EtcdStore
	keys models.Keys
	ck   models.ClusterKeys
	c    *requestCounts
}

// requestCounts is shared by every agent's store.
type requestCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

func (r *requestCounts) add(kind string) {
	r.mu.Lock()
	r.n[kind]++
	r.mu.Unlock()
}

// String lists the counts, sorted by kind.
func (r *requestCounts) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	kinds := make([]string, 0, len(r.n))
	for k := range r.n {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	for i, k := range kinds {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, r.n[k])
	}
	return b.String()
}

func (s *countingStore) family(key string) string {
	switch {
	case strings.HasPrefix(key, s.ck.ISRPrefix()):
		return "isr"
	case strings.HasPrefix(key, s.ck.NodesPrefix()):
		return "node"
	case strings.HasPrefix(key, s.keys.ShardStatePrefix()):
		return "state"
	}
	return "other"
}

func (s *countingStore) Get(ctx context.Context, key string) (*kv.KeyValue, error) {
	s.c.add("get_" + s.family(key))
	return s.EtcdStore.Get(ctx, key)
}

func (s *countingStore) GetMany(ctx context.Context, keys []string) ([]*kv.KeyValue, uint64, error) {
	s.c.add(fmt.Sprintf("getmany_%d", len(keys)))
	return s.EtcdStore.GetMany(ctx, keys)
}

// Grant and KeepAlive are counted to show the keep-alives resumed on a
// lease etcd still held (keepalive above grant).
func (s *countingStore) Grant(ctx context.Context, ttl time.Duration) (kv.LeaseID, error) {
	s.c.add("grant")
	return s.EtcdStore.Grant(ctx, ttl)
}

func (s *countingStore) KeepAlive(ctx context.Context, id kv.LeaseID) (<-chan struct{}, error) {
	s.c.add("keepalive")
	return s.EtcdStore.KeepAlive(ctx, id)
}

func (s *countingStore) ClusterID(ctx context.Context) (uint64, error) {
	s.c.add("cluster_id")
	return s.EtcdStore.ClusterID(ctx)
}

func (s *countingStore) Txn(ctx context.Context, cmps []kv.Cmp, ops []kv.Op) (bool, int64, error) {
	fam := "none"
	if len(ops) > 0 {
		fam = s.family(ops[0].Key)
	}
	ok, rev, err := s.EtcdStore.Txn(ctx, cmps, ops)
	switch {
	case err != nil:
		s.c.add("txn_" + fam + "_err")
	case !ok:
		s.c.add("txn_" + fam + "_failed")
		s.whyFailed(ctx, cmps)
	default:
		s.c.add("txn_" + fam)
	}
	return ok, rev, err
}

// whyFailed counts which compares of a failed txn do not hold now (read
// after the fact: a diagnostic, close enough to say which guard fails).
func (s *countingStore) whyFailed(ctx context.Context, cmps []kv.Cmp) {
	for _, c := range cmps {
		kvp, err := s.EtcdStore.Get(ctx, c.Key)
		if err != nil {
			return
		}
		var modRev, createRev int64
		if kvp != nil {
			modRev, createRev = kvp.ModRev, kvp.CreateRev
		}
		switch {
		case c.Kind == kv.CmpModRev && modRev != c.Rev:
			s.c.add("cmp_failed_mod_" + s.family(c.Key))
		case c.Kind == kv.CmpCreateRev && createRev != c.Rev:
			s.c.add("cmp_failed_create_" + s.family(c.Key))
		}
	}
}
