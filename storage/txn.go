package storage

import (
	"fmt"
	"net/http"
	"strconv"

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

// txn is this replica's answer to the master.
func (r *replica) txn() models.ReplicaTxn {
	r.applyMu.Lock() // no truncation or restore meanwhile
	last, lastTerm := r.eng.LastEntry()
	r.applyMu.Unlock()
	r.mu.Lock()
	term := r.want.term
	r.mu.Unlock()
	seen := r.h.terms.snapshot([]string{r.id})[r.id]
	return models.ReplicaTxn{LastTxnID: last, LastTerm: lastTerm, Term: term, SeenTerm: max(seen, term)}
}
