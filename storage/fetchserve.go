package storage

import (
	"encoding/json"
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
const maxFetchWait = 30 * time.Second

// errBadFetch: a batched fetch request that cannot be served.
var errBadFetch = errors.New("storage: bad batched fetch")

func (h *Host) handleFetch(c *gin.Context) {
	var req client.FetchRequest
	if err := json.NewDecoder(io.LimitReader(c.Request.Body, 4<<20)).Decode(&req); err != nil ||
		!models.ValidName(req.Node) || len(req.Shards) == 0 || len(req.Shards) > maxFetchShards {
		replyErr(c, fmt.Errorf("%w: %w: need node and 1 to %d shards", models.ErrBadInput, errBadFetch, maxFetchShards))
		return
	}
	wait := min(time.Duration(req.WaitMS)*time.Millisecond, maxFetchWait)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	var out []byte
	var parked []*replica
	woken := make(chan struct{}, 1) // an append or role change of one of the parked replicas
	defer func() {
		for _, r := range parked {
			r.park(req.Node, -1)
			h.unwatch(r, woken)
		}
	}()
	for registered := false; ; {
		out = h.fetchAll(c, req, out[:0])
		if len(out) > 0 || wait <= 0 {
			break
		}
		if !registered {
			// While parked the follower counts as fetching for the
			// in-sync upkeep: an idle poll may outlast the catch-up window.
			// Only the replicas asked about wake this fetch; it looks once
			// more after registering, so an append in between is not missed.
			registered = true
			for _, s := range req.Shards {
				if r := h.get(s.DB, s.Shard); r != nil {
					r.park(req.Node, 1)
					h.watch(r, woken)
					parked = append(parked, r)
				}
			}
			continue
		}
		select {
		case <-c.Request.Context().Done():
			return
		case <-deadline.C:
			out = h.fetchAll(c, req, out[:0]) // records the fetch for the in-sync upkeep
			wait = 0
		case <-woken:
			continue
		}
		break
	}
	c.Data(http.StatusOK, "application/octet-stream", out)
}

// fetchAll serves every shard of a batched fetch once, without waiting, and
// appends the records of those with something to say.
func (h *Host) fetchAll(c *gin.Context, req client.FetchRequest, out []byte) []byte {
	for i, s := range req.Shards {
		r := h.get(s.DB, s.Shard)
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
