package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

// maxTxnShards bounds one last-txn question: a node hosts at most a few
// thousand replicas, and the master asks about one database at a time.
const maxTxnShards = 4096

// ErrBadAnswer: a storage node's answer did not decode or did not match the
// question.
var ErrBadAnswer = errors.New("storage: bad answer from storage node")

// txnAnswer is the body of GET /internal/v1/txn.
type txnAnswer struct {
	Shards map[string]models.ReplicaTxn `json:"shards"` // shard number -> answer (hosted shards only)
}

// handleTxn answers the master's question at failover: the last txn id and
// terms of some replicas of one database on this node.
// GET /internal/v1/txn?db=D&shard=N[&shard=M...]
func (h *Host) handleTxn(c *gin.Context) {
	db, shards := c.Query("db"), c.QueryArray("shard")
	if !models.ValidName(db) || len(shards) == 0 || len(shards) > maxTxnShards {
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": gin.H{"code": "bad_request",
			"message": fmt.Sprintf("need db (a valid name) and 1 to %d shard numbers", maxTxnShards)}})
		return
	}
	out := txnAnswer{Shards: make(map[string]models.ReplicaTxn, len(shards))}
	for _, s := range shards {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": gin.H{"code": "bad_request", "message": fmt.Sprintf("bad shard number %q", s)}})
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
	defer r.mu.Unlock()
	return models.ReplicaTxn{LastTxnID: last, LastTerm: lastTerm, Term: r.want.term}
}

// AskTxn asks the storage node at address for the last txn id and terms of
// its replicas of db's shards: one request for all of them. Shards the node
// does not host are absent from the answer.
func AskTxn(ctx context.Context, client *http.Client, address, db string, shards []int) (map[int]models.ReplicaTxn, error) {
	q := url.Values{"db": {db}}
	for _, s := range shards {
		q.Add("shard", strconv.Itoa(s))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+address+"/internal/v1/txn?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered %d: %.200s", ErrBadAnswer, address, resp.StatusCode, body)
	}
	var a txnAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadAnswer, address, err)
	}
	out := make(map[int]models.ReplicaTxn, len(a.Shards))
	for s, v := range a.Shards {
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: shard %q", ErrBadAnswer, address, s)
		}
		out[n] = v
	}
	return out, nil
}
