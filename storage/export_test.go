package storage

import (
	"slices"

	"github.com/cairn-db/cairn/models"
)

// ParkedFetches counts the batched fetches parked on this host's replicas
// now, as their leaders' in-sync upkeep counts them.
func (h *Host) ParkedFetches() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := 0
	for _, r := range h.replicas {
		r.mu.Lock()
		for _, p := range r.ls.parked {
			n += p
		}
		r.mu.Unlock()
	}
	return n
}

// StatesDecoded counts the shard-state records this host's in-sync set
// writes decoded themselves (not taken from the watched state).
func (h *Host) StatesDecoded() int64 { return h.statesDecoded.Load() }

// Looked counts the replicas this host's reconcile passes looked at.
func (h *Host) Looked() int64 { return h.looked.Load() }

// IdleFetchWait is the longest park of a batched fetch session (with a
// FetchWait below it): a new session's first.
const IdleFetchWait = idleFetchWait

// PlacedSets counts the first in-sync sets this host's leaders took from the
// watched state without reading them (placedSet).
func (h *Host) PlacedSets() int64 { return h.placedSets.Load() }

// LeaderSet is the in-sync set the leader of db/shard on this host leads
// with (nil: none yet, or not leading).
func (h *Host) LeaderSet(db string, shard int) []string {
	h.mu.RLock()
	r := h.replicas[models.ShardID(db, shard)]
	h.mu.RUnlock()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ls.isr)
}
