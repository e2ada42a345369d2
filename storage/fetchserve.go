package storage

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/gin-gonic/gin"
)

// The server side of batched fetches (client.Fetch, which documents the
// wire format).

// maxFetchShards bounds one batched fetch.
const maxFetchShards = 8192

// maxFetchWait bounds how long a batched fetch is parked.
const maxFetchWait = time.Minute

// errBadFetch: a batched fetch request that cannot be served.
var errBadFetch = errors.New("storage: bad batched fetch")

func (h *Host) handleFetch(c *gin.Context) {
	req, err := readFetchRequest(c.Request.Body)
	if err != nil || !models.ValidName(req.Node) || len(req.Shards) == 0 || len(req.Shards) > maxFetchShards {
		replyErr(c, fmt.Errorf("%w: %w: need node and 1 to %d shards", models.ErrBadInput, errBadFetch, maxFetchShards))
		return
	}
	wait := min(time.Duration(req.WaitMS)*time.Millisecond, maxFetchWait)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var out []byte
	var parked []*replica
	woken := make(chan struct{}, 1) // an append or role change of one of the parked replicas
	// A parked fetch holds the shards whose leadership this node has not
	// taken up yet (held; see fetchAll) until it does or the park ends. It
	// watches a held shard's replica (its role change signals it, as an
	// append does) or, while there is none, the creation of replicas here.
	// A fetch that does not park needs none of it.
	var held, registered []bool
	var heldOn []*replica // the replica watched while held, by shard
	if wait > 0 {
		held, registered, heldOn = make([]bool, len(req.Shards)), make([]bool, len(req.Shards)), make([]*replica, len(req.Shards))
	}
	defer func() {
		for _, r := range parked {
			r.park(req.Node, -1)
			h.unwatch(r, woken)
		}
		for _, r := range heldOn {
			if r != nil {
				h.unwatch(r, woken)
			}
		}
	}()
	for {
		var created <-chan struct{}
		if held != nil {
			created = h.replicaCreated() // before looking: a replica opened meanwhile is not missed
		}
		out = h.fetchAll(c, req, out[:0], held)
		if len(out) > 0 || wait <= 0 {
			break
		}
		// While parked the follower counts as fetching for the in-sync
		// upkeep: an idle poll may outlast the catch-up window. Only the
		// replicas asked about wake this fetch; it looks once more after
		// registering, so an append or role change in between is not
		// missed. A held shard is registered as parked once its leadership
		// is taken up (a registration before would be lost with the role
		// change's bookkeeping).
		added := h.parkFetch(req, held, registered, woken, &parked)
		watched, absent := h.watchHeld(req, held, heldOn, woken)
		if added || watched {
			continue
		}
		if !absent {
			created = nil
		}
		select {
		case <-c.Request.Context().Done():
			return
		case <-deadline.C:
			out = h.fetchAll(c, req, out[:0], nil) // records the fetch for the in-sync upkeep; held shards answer now
			wait = 0
		case <-woken:
			continue
		case <-created:
			continue
		}
		break
	}
	c.Data(http.StatusOK, "application/octet-stream", out)
}

// maxFetchBody bounds a batched fetch request's body.
const maxFetchBody = 4 << 20

// readFetchRequest reads and decodes a batched fetch request's body, at most
// maxFetchBody bytes.
func readFetchRequest(body io.Reader) (client.FetchRequest, error) {
	b, err := readBody(body, maxFetchBody, "a batched fetch")
	if err != nil {
		return client.FetchRequest{}, err
	}
	return client.DecodeFetchRequest(b)
}

// watchHeld makes the replica of each held shard of req signal woken (an
// append or role change, as parkFetch's), once per replica (heldOn holds
// those watched, by shard); watched when it watched one more, absent when a
// held shard has no replica here yet.
func (h *Host) watchHeld(req client.FetchRequest, held []bool, heldOn []*replica, woken chan struct{}) (watched, absent bool) {
	for i, s := range req.Shards {
		if held == nil || !held[i] {
			continue
		}
		r := h.get(s.DB, s.Shard)
		switch {
		case r == nil:
			absent = true
		case heldOn[i] != r:
			if heldOn[i] != nil {
				h.unwatch(heldOn[i], woken)
			}
			h.watch(r, woken)
			heldOn[i], watched = r, true
		}
	}
	return watched, absent
}

// parkFetch registers the fetch (woken) on the replicas of req's shards not
// registered yet and not held, as parked by req.Node; true when it
// registered one.
func (h *Host) parkFetch(req client.FetchRequest, held, registered []bool, woken chan struct{}, parked *[]*replica) bool {
	added := false
	for i, s := range req.Shards {
		if registered[i] || (held != nil && held[i]) {
			continue
		}
		if r := h.get(s.DB, s.Shard); r != nil {
			r.park(req.Node, 1)
			h.watch(r, woken)
			*parked = append(*parked, r)
			registered[i], added = true, true
		}
	}
	return added
}

// fetchAll serves every shard of a batched fetch once, without waiting, and
// appends the records of those with something to say. With held (one flag
// per shard), a shard this node does not host yet, or hosts at a term below
// the one asked for, is held instead of answered (flagged, no record): the
// follower saw the leadership in its state before this node did, as every
// follower of a new database races its leader, and an error would send it
// through a per-shard pull and a back-off for what is only a moment's lag.
func (h *Host) fetchAll(c *gin.Context, req client.FetchRequest, out []byte, held []bool) []byte {
	for i, s := range req.Shards {
		r := h.get(s.DB, s.Shard)
		if held != nil {
			if held[i] = r == nil || r.termBelow(s.Term); held[i] {
				continue
			}
		}
		if r == nil {
			out = client.AppendFetchRecord(out, i, client.FetchError, http.StatusNotFound, nil)
			continue
		}
		res, err := r.fetch(c.Request.Context(), fetchReq{term: s.Term, node: req.Node, after: s.After, afterTerm: s.AfterTerm, max: 64})
		switch {
		case err != nil:
			status, _ := models.StatusOf(err)
			out = client.AppendFetchRecord(out, i, client.FetchError, uint64(status), nil)
		case res.fullSync:
			out = client.AppendFetchRecord(out, i, client.FetchFullSync, 0, nil)
		case res.truncateTo != nil:
			out = client.AppendFetchRecord(out, i, client.FetchTruncate, *res.truncateTo, nil)
		case len(res.entries) > 0:
			enc := make([][]byte, 0, len(res.entries))
			for _, e := range res.entries {
				b, err := e.MarshalBinary()
				if err != nil {
					break
				}
				enc = append(enc, b)
			}
			out = client.AppendFetchRecord(out, i, client.FetchEntries, 0, enc)
		}
	}
	return out
}

// replicaCreated is closed when this node next opens a replica
// (signalCreated).
func (h *Host) replicaCreated() <-chan struct{} {
	h.waitMu.Lock()
	defer h.waitMu.Unlock()
	return h.created
}

// signalCreated wakes the fetches holding a shard this node had no replica
// of (fetchAll).
func (h *Host) signalCreated() {
	h.waitMu.Lock()
	defer h.waitMu.Unlock()
	close(h.created)
	h.created = make(chan struct{})
}

// watch makes an append or role change of r signal ch (buffered 1).
func (h *Host) watch(r *replica, ch chan struct{}) {
	h.waitMu.Lock()
	defer h.waitMu.Unlock()
	r.watchers.Add(1)
	w := h.waiters[r]
	if w == nil {
		w = map[chan struct{}]int{}
		h.waiters[r] = w
	}
	w[ch]++
}

func (h *Host) unwatch(r *replica, ch chan struct{}) {
	h.waitMu.Lock()
	defer h.waitMu.Unlock()
	r.watchers.Add(-1)
	w := h.waiters[r]
	if w[ch]--; w[ch] <= 0 {
		delete(w, ch)
	}
	if len(w) == 0 {
		delete(h.waiters, r)
	}
}

// signalAppend wakes the batched fetches parked on r: those of its
// followers, not every fetch parked on this node. A replica nobody watches
// (no follower parked on it, as with one replica) takes no lock: every
// write of every shard took this node-wide one. A fetch registers before
// it looks at the log once more, and an append is published before it is
// signalled, so one of the two sees the other.
func (h *Host) signalAppend(r *replica) {
	if r.watchers.Load() == 0 {
		return
	}
	h.waitMu.Lock()
	defer h.waitMu.Unlock()
	for ch := range h.waiters[r] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
