package storage

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/cairn-db/cairn/internal/backoff"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/gin-gonic/gin"
)

// maxTxnShards bounds one last-txn question: a node hosts at most a few
// thousand replicas, and the master asks about one database at a time.
const maxTxnShards = 4096

// handleTxn answers the master's question at failover (client.Txn): the last txn id and
// terms of some replicas of one database on this node.
// GET /internal/v1/txn?db=D&shard=N[&shard=M...]
func (h *Host) handleTxn(c *gin.Context) {
	db, shards := c.Query("db"), c.QueryArray("shard")
	if !models.ValidName(db) || len(shards) == 0 || len(shards) > maxTxnShards {
		replyErr(c, fmt.Errorf("%w: need db (a valid name) and 1 to %d shard numbers", models.ErrBadInput, maxTxnShards))
		return
	}
	out := client.TxnAnswer{Shards: make(map[string]models.ReplicaTxn, len(shards))}
	for _, s := range shards {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			replyErr(c, fmt.Errorf("%w: bad shard number %q", models.ErrBadInput, s))
			return
		}
		if r := h.get(db, n); r != nil {
			out.Shards[s] = r.txn()
		}
	}
	c.JSON(http.StatusOK, out)
}

// txnBusyWait bounds how long a batched answer waits for replicas whose log
// is busy (an append holds it for moments, a snapshot restore for as long
// as the snapshot streams): those still busy are left out of the answer,
// as silent ones, rather than holding up the node's whole answer past the
// master's deadline.
const txnBusyWait = 100 * time.Millisecond

// handleTxns answers the master's batched question at failover
// (client.Txns): the last txn id and terms of this node's replicas of the
// shards asked about, of any databases.
// POST /internal/v1/txns  body client.TxnsRequest
func (h *Host) handleTxns(c *gin.Context) {
	req, err := readTxnsRequest(c.Request.Body)
	if err != nil {
		replyErr(c, err)
		return
	}
	c.JSON(http.StatusOK, h.answerTxns(c.Request.Context(), req))
}

// readTxnsRequest reads and checks a batched question: refused with
// models.ErrTooLarge past client.MaxTxnsBody bytes or client.MaxTxnsShards
// shards, models.ErrBadInput when malformed.
func readTxnsRequest(body io.Reader) (client.TxnsRequest, error) {
	var req client.TxnsRequest
	raw, err := readBody(body, client.MaxTxnsBody, "a last txn question")
	if err != nil {
		return req, err
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		return req, fmt.Errorf("%w: a last txn question: %w", models.ErrBadInput, err)
	}
	n := 0
	for db, ids := range req.DBs {
		if !models.ValidName(db) {
			return req, fmt.Errorf("%w: a last txn question: bad database name %q", models.ErrBadInput, db)
		}
		for _, id := range ids {
			if id < 0 {
				return req, fmt.Errorf("%w: a last txn question: bad shard number %d of %s", models.ErrBadInput, id, db)
			}
		}
		n += len(ids)
	}
	switch {
	case n == 0:
		return req, fmt.Errorf("%w: a last txn question names no shard", models.ErrBadInput)
	case n > client.MaxTxnsShards:
		return req, fmt.Errorf("%w: a last txn question of %d shards (at most %d)", models.ErrTooLarge, n, client.MaxTxnsShards)
	}
	return req, nil
}

// answerTxns reads the position of every replica asked about that this
// node hosts, without waiting on busy logs for longer than txnBusyWait in
// all, and their seen terms in one look.
func (h *Host) answerTxns(ctx context.Context, req client.TxnsRequest) client.TxnsAnswer {
	type answer struct {
		r     *replica
		shard int
		a     models.ReplicaTxn
	}
	var got, busy []answer
	try := func(q answer) bool {
		a, ok := q.r.position(false)
		if ok {
			q.a = a
			got = append(got, q)
		}
		return ok
	}
	for db, shards := range req.DBs {
		for _, n := range shards {
			if r := h.get(db, n); r != nil {
				if q := (answer{r: r, shard: n}); !try(q) {
					busy = append(busy, q)
				}
			}
		}
	}
	if len(busy) > 0 {
		wctx, cancel := context.WithTimeout(ctx, txnBusyWait)
		b := backoff.New(time.Millisecond, 10*time.Millisecond)
		for len(busy) > 0 && b.Wait(wctx) {
			busy = slices.DeleteFunc(busy, try)
		}
		cancel()
	}
	ids := make([]string, len(got))
	for i, q := range got {
		ids[i] = q.r.id
	}
	seen := h.terms.snapshot(ids)
	out := client.TxnsAnswer{DBs: map[string]map[string]models.ReplicaTxn{}}
	for _, q := range got {
		if out.DBs[q.r.db] == nil {
			out.DBs[q.r.db] = map[string]models.ReplicaTxn{}
		}
		q.a.SeenTerm = max(seen[q.r.id], q.a.Term)
		out.DBs[q.r.db][strconv.Itoa(q.shard)] = q.a
	}
	return out
}

// txn is this replica's answer to the master.
func (r *replica) txn() models.ReplicaTxn {
	a, _ := r.position(true)
	seen := r.h.terms.snapshot([]string{r.id})[r.id]
	a.SeenTerm = max(seen, a.Term)
	return a
}

// position is this replica's last entry and the term it serves at (no seen
// term). Without wait it does not wait for a busy log: ok is false when an
// append, truncation or restore holds it.
func (r *replica) position(wait bool) (a models.ReplicaTxn, ok bool) {
	if wait {
		r.applyMu.Lock() // no truncation or restore meanwhile
	} else if !r.applyMu.TryLock() {
		return a, false
	}
	a.LastTxnID, a.LastTerm = r.eng.LastEntry()
	r.applyMu.Unlock()
	r.mu.Lock()
	a.Term = r.want.term
	r.mu.Unlock()
	return a, true
}
