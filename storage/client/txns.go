package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/cairn-db/cairn/models"
)

// The batched last-txn question (POST /internal/v1/txns): the master's
// failover round asks each live node once about every shard of the round
// the node holds, of any number of databases, where the per-database
// question (Txn) took one request per node and database. A node of an older
// release answers 404 (ErrUnsupported); the caller then asks it per
// database.

// Limits of one batched question: a node refuses more shards with 413 and a
// body over MaxTxnsBody with 413 (a malformed one with 400). Txns splits a
// larger question into requests within them.
const (
	MaxTxnsShards = 4096
	MaxTxnsBody   = 1 << 20
)

// TxnsRequest is the body of POST /internal/v1/txns: database -> shard
// numbers.
type TxnsRequest struct {
	DBs map[string][]int `json:"dbs"`
}

// TxnsAnswer is its answer: database -> shard number -> answer, for the
// replicas the node hosts and could read without waiting (the others are
// absent, as silent ones).
type TxnsAnswer struct {
	DBs map[string]map[string]models.ReplicaTxn `json:"dbs"`
}

// maxTxnsAnswer bounds one batched answer: MaxTxnsShards answers of ~100
// bytes and their database names.
const maxTxnsAnswer = 4 << 20

// Txns asks the storage node p for the last txn id and terms of its
// replicas of the given shards (database -> shard numbers), in as few
// requests as the limits allow (one, but for a node asked about more than
// MaxTxnsShards). Shards the node does not host are absent from the answer.
func (c *Client) Txns(ctx context.Context, p Peer, shards map[string][]int) (map[string]map[int]models.ReplicaTxn, error) {
	out := map[string]map[int]models.ReplicaTxn{}
	for _, req := range splitTxns(shards, MaxTxnsShards) {
		if err := c.txns(ctx, p, req, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// splitTxns cuts a question into requests of at most limit shards each
// (databases in name order, a database's shards split where the limit
// falls).
func splitTxns(shards map[string][]int, limit int) []TxnsRequest {
	var reqs []TxnsRequest
	cur, n := TxnsRequest{DBs: map[string][]int{}}, 0
	for _, db := range slices.Sorted(maps.Keys(shards)) {
		ids := shards[db]
		for len(ids) > 0 {
			take := min(len(ids), limit-n)
			cur.DBs[db] = append(cur.DBs[db], ids[:take]...)
			ids, n = ids[take:], n+take
			if n == limit {
				reqs = append(reqs, cur)
				cur, n = TxnsRequest{DBs: map[string][]int{}}, 0
			}
		}
	}
	if n > 0 {
		reqs = append(reqs, cur)
	}
	return reqs
}

func (c *Client) txns(ctx context.Context, p Peer, req TxnsRequest, out map[string]map[int]models.ReplicaTxn) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, p, http.MethodPost, "/internal/v1/txns", "application/json", bytes.NewReader(body), http.StatusOK)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := readAll(resp.Body, maxTxnsAnswer)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadAnswer, p, err)
	}
	var a TxnsAnswer
	if err := json.Unmarshal(data, &a); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadAnswer, p, err)
	}
	type key struct {
		db    string
		shard int
	}
	asked := map[key]bool{}
	for db, ids := range req.DBs {
		for _, id := range ids {
			asked[key{db, id}] = true
		}
	}
	for db, got := range a.DBs {
		for s, v := range got {
			n, err := strconv.Atoi(s)
			if err != nil || !asked[key{db, n}] {
				return fmt.Errorf("%w: %s: shard %q of %q was not asked about", ErrBadAnswer, p, s, db)
			}
			if out[db] == nil {
				out[db] = map[int]models.ReplicaTxn{}
			}
			out[db][n] = v
		}
	}
	return nil
}
