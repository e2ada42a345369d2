package peerauth

import (
	"encoding/hex"
	"fmt"
	"sync"
)

// ReplayCacheSize is how many recent proofs a verifier remembers: about
// 3 MiB. At 200 internal requests a second that covers the whole skew
// window; past that rate the window it covers shrinks (see replayCache).
const ReplayCacheSize = 1 << 16

// replayCache remembers the proofs accepted recently, so a captured request
// cannot be replayed inside the skew window. It is bounded: when full it
// forgets the oldest proof and from then on refuses requests dated at or
// before the newest date it forgot. A replay is therefore never accepted;
// under a very high request rate a request delayed longer than the cache
// covers is refused as stale (the sender signs a fresh one on retry).
type replayCache struct {
	mu    sync.Mutex
	seen  map[[16]byte]struct{}
	ring  []replayEntry
	next  int   // slot the next proof goes to
	floor int64 // unix ms: requests dated at or before it are refused
}

type replayEntry struct {
	key  [16]byte
	date int64
	used bool
}

func newReplayCache(size int) *replayCache {
	return &replayCache{seen: make(map[[16]byte]struct{}, size), ring: make([]replayEntry, size)}
}

// add records a proof's signature dated date (unix ms); oldest is the
// oldest date the skew window accepts. It fails for a proof seen before, or
// dated before what the cache still covers.
func (c *replayCache) add(sig string, date, oldest int64) error {
	var key [16]byte // half the MAC: 128 bits
	_, _ = hex.Decode(key[:], []byte(sig[len(sigPrefix):len(sigPrefix)+32]))
	c.mu.Lock()
	defer c.mu.Unlock()
	if date <= c.floor && c.floor >= oldest {
		return fmt.Errorf("%w: request older than the %d most recent ones this node remembers", ErrStale, len(c.ring))
	}
	if _, ok := c.seen[key]; ok {
		return ErrReplayed
	}
	if e := c.ring[c.next]; e.used {
		delete(c.seen, e.key)
		c.floor = max(c.floor, e.date)
	}
	c.ring[c.next] = replayEntry{key: key, date: date, used: true}
	c.seen[key] = struct{}{}
	c.next = (c.next + 1) % len(c.ring)
	return nil
}
