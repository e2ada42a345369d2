package storage

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
