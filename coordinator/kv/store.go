// Package kv is Cairn's only door to etcd: a small key-value Store
// interface with an etcd implementation and an in-memory one, list-then-watch
// on top of it, leased sessions and the master election. Everything above it
// speaks in keys, revisions and leases, never in etcd client types.
package kv

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors. Implementations wrap their own errors around these so callers
// can use errors.Is.
var (
	// ErrCompacted means a watch asked for a revision that was compacted away.
	ErrCompacted = errors.New("kv: revision compacted")
	// ErrUnavailable means the store could not be reached (no quorum, down).
	ErrUnavailable = errors.New("kv: store unavailable")
	// ErrLeaseNotFound means the lease expired or was revoked.
	ErrLeaseNotFound = errors.New("kv: lease not found")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("kv: store closed")
	// ErrNoSpace means etcd raised its NOSPACE alarm: it refuses every write
	// (before applying it) until an operator compacts, defragments or raises
	// the quota and disarms the alarm. Reads keep working.
	ErrNoSpace = errors.New("kv: etcd out of space (NOSPACE alarm)")
	// ErrOutcomeUnknown marks a write whose request may have reached etcd but
	// whose answer did not come back (a timeout, a lost connection): it may
	// or may not have been applied. Such errors also match ErrUnavailable.
	ErrOutcomeUnknown = errors.New("kv: write outcome unknown")
	// ErrAccessDenied means etcd refused the client's credentials: a wrong
	// user or password, no credentials while etcd's auth is on, or a user
	// whose roles do not cover the key. Retrying does not help.
	ErrAccessDenied = errors.New("kv: etcd refused access")
)

// LeaseID identifies a lease; 0 means none.
type LeaseID int64

// KeyValue is one stored key with its revisions.
type KeyValue struct {
	Key       string
	Value     []byte
	CreateRev int64
	ModRev    int64
	Lease     LeaseID
}

// CmpKind is what a Cmp compares.
type CmpKind int

// Comparison kinds.
const (
	CmpCreateRev CmpKind = iota // key's create revision equals Rev (0: key absent)
	CmpModRev                   // key's mod revision equals Rev (0: key absent)
	CmpValue                    // key's value equals Value
)

// Cmp is one condition of a transaction.
type Cmp struct {
	Kind  CmpKind
	Key   string
	Rev   int64
	Value []byte
}

// CreateRevIs holds when key's create revision is rev; rev 0 means "absent".
func CreateRevIs(key string, rev int64) Cmp { return Cmp{Kind: CmpCreateRev, Key: key, Rev: rev} }

// ModRevIs holds when key's mod revision is rev; rev 0 means "absent".
func ModRevIs(key string, rev int64) Cmp { return Cmp{Kind: CmpModRev, Key: key, Rev: rev} }

// ValueIs holds when key exists with this value.
func ValueIs(key string, v []byte) Cmp { return Cmp{Kind: CmpValue, Key: key, Value: v} }

// Op is one write of a transaction.
type Op struct {
	Delete bool
	Key    string
	Value  []byte
	Lease  LeaseID
}

// OpPut writes key.
func OpPut(key string, value []byte, lease LeaseID) Op {
	return Op{Key: key, Value: value, Lease: lease}
}

// OpDelete removes key.
func OpDelete(key string) Op { return Op{Delete: true, Key: key} }

// EventType says what happened to a key.
type EventType int

// Event types.
const (
	EventPut EventType = iota
	EventDelete
)

// RawEvent is one change seen by a raw watch.
type RawEvent struct {
	Type EventType
	KV   KeyValue // for deletes, Key and ModRev only
}

// RawWatchResponse is one batch from a raw watch, or its terminal error.
type RawWatchResponse struct {
	Events []RawEvent
	Rev    int64 // store revision of this response (progress)
	Err    error // ErrCompacted, ErrUnavailable...; the channel closes after it
}

// Store is the small key-value interface Cairn needs from etcd.
type Store interface {
	// Get returns the key or nil when absent.
	Get(ctx context.Context, key string) (*KeyValue, error)
	// List returns every key under prefix, sorted, and the store revision.
	List(ctx context.Context, prefix string) ([]KeyValue, int64, error)
	// ListAt is List at a past revision, paged: keys > after, at most limit.
	ListAt(ctx context.Context, prefix, after string, rev int64, limit int) ([]KeyValue, int64, error)
	// Put writes key (attached to lease when non-zero) and returns the new revision.
	Put(ctx context.Context, key string, value []byte, lease LeaseID) (int64, error)
	// Delete removes key and reports whether it existed.
	Delete(ctx context.Context, key string) (bool, error)
	// DeletePrefix removes every key under prefix and returns how many.
	DeletePrefix(ctx context.Context, prefix string) (int64, error)
	// Txn applies ops when every cmp holds, atomically.
	Txn(ctx context.Context, cmps []Cmp, ops []Op) (ok bool, rev int64, err error)
	// Grant creates a lease.
	Grant(ctx context.Context, ttl time.Duration) (LeaseID, error)
	// KeepAlive keeps the lease alive until ctx ends; the returned channel
	// closes when the lease is lost (expired, revoked or unreachable past its TTL).
	KeepAlive(ctx context.Context, id LeaseID) (<-chan struct{}, error)
	// Revoke ends a lease and deletes its keys.
	Revoke(ctx context.Context, id LeaseID) error
	// Watch streams changes under prefix from revision fromRev (inclusive).
	Watch(ctx context.Context, prefix string, fromRev int64) <-chan RawWatchResponse
	// Compact discards history before rev.
	Compact(ctx context.Context, rev int64) error
	// ClusterID identifies the backing cluster; it changes when etcd is replaced.
	ClusterID(ctx context.Context) (uint64, error)
	// Header returns the cluster id and the current store revision in one
	// call: a watcher compares both to notice a replaced or restored etcd.
	Header(ctx context.Context) (clusterID uint64, rev int64, err error)
	// Close releases the client.
	Close() error
}
