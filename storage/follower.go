package storage

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cairn-db/cairn/backoff"
	"github.com/cairn-db/cairn/storage/engine"
	"go.uber.org/zap"
)

// follow pulls the leader's log from our last txn id until the role changes.
// The pulls go through the node's batched fetch session with the leader (one
// long-poll for every shard this node follows there); a shard the session
// hands back (its log diverged, it needs a full sync, the leader refused it)
// pulls once alone through the per-shard API, which truncates a diverged
// tail or fully syncs a replica too far behind, and then joins again.
func (r *replica) follow(ctx context.Context, d desired) {
	bo := backoff.New(50*time.Millisecond, time.Second)
	for ctx.Err() == nil {
		solo := r.h.join(r, d.address, d.term)
		var why error
		select {
		case <-ctx.Done():
			r.h.part(r, d.address)
			return
		case why = <-solo:
		}
		r.lg.Debug("pulling alone", zap.String("leader", d.leader), zap.Error(why))
		err := r.pullOnce(ctx, d)
		if err == nil {
			bo.Reset()
			continue
		}
		if ctx.Err() != nil {
			return
		}
		r.lg.Debug("fetch from leader failed", zap.String("leader", d.leader), zap.Error(err))
		r.sleep(ctx, bo.Next())
	}
}

func (r *replica) pullOnce(ctx context.Context, d desired) error {
	last, lastTerm := r.eng.LastEntry()
	if lastTerm > uint64(d.term) {
		// Raft's rule: never take a log from a leadership older than the
		// newest one ours holds entries of. That leader (a restored state's)
		// would truncate entries that may be acknowledged; wait instead for
		// the master to publish a term above ours (it sees our max_term).
		return fmt.Errorf("%w: leader %s is at term %d, our log holds term %d", ErrStaleTerm, d.leader, d.term, lastTerm)
	}
	q := url.Values{}
	q.Set("term", strconv.FormatInt(d.term, 10))
	q.Set("node", r.h.nodeID)
	q.Set("after", strconv.FormatUint(last, 10))
	q.Set("after_term", strconv.FormatUint(lastTerm, 10))
	q.Set("wait_ms", "0")
	u := fmt.Sprintf("http://%s/internal/v1/shards/%s/%d/log?%s", d.address, r.db, r.shard, q.Encode())
	resp, err := r.h.call(ctx, http.MethodGet, u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return r.applyStream(resp.Body)
	case http.StatusResetContent: // truncate
		to, err := strconv.ParseUint(resp.Header.Get("X-Cairn-Truncate-To"), 10, 64)
		if err != nil {
			return fmt.Errorf("bad truncate answer: %w", err)
		}
		r.applyMu.Lock()
		err = r.eng.TruncateAfter(to)
		r.applyMu.Unlock()
		if errors.Is(err, engine.ErrCompacted) {
			return r.fullSync(ctx, d)
		}
		if err == nil {
			r.lg.Info("truncated divergent tail", zap.Uint64("after", to), zap.Uint64("was", last))
		}
		return err
	case http.StatusGone:
		return r.fullSync(ctx, d)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return fmt.Errorf("leader answered %d: %s", resp.StatusCode, body)
}

// applyStream applies length-prefixed encoded entries in order: they are
// queued as they arrive, committed in groups, and it returns once the last
// one is durable.
func (r *replica) applyStream(body io.Reader) (err error) {
	var wait func() error // of the last entry queued
	defer func() { err = errors.Join(err, waitApplied(wait)) }()
	br := bufio.NewReaderSize(body, 64<<10)
	for {
		n, err := binary.ReadUvarint(br)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(br, buf); err != nil {
			return err
		}
		var e engine.Entry
		if err := e.UnmarshalBinary(buf); err != nil {
			return err
		}
		next, err := r.append(e)
		if err != nil {
			return err
		}
		wait = next
	}
}

// append queues a leader's entry for the group commit.
func (r *replica) append(e engine.Entry) (func() error, error) {
	r.applyMu.Lock()
	wait, err := r.eng.Append(e)
	r.applyMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("apply txn %d: %w", e.TxnID, err)
	}
	return func() error {
		if err := wait(); err != nil {
			return fmt.Errorf("apply txn %d: %w", e.TxnID, err)
		}
		return nil
	}, nil
}

// waitApplied waits for the last entry queued (nil: none was); a failed
// commit fails every entry queued after it, so the last one's answer covers
// them all.
func waitApplied(wait func() error) error {
	if wait == nil {
		return nil
	}
	return wait()
}

// fullSync replaces the local replica with the leader's snapshot.
func (r *replica) fullSync(ctx context.Context, d desired) error {
	u := fmt.Sprintf("http://%s/internal/v1/shards/%s/%d/snapshot?term=%d", d.address, r.db, r.shard, d.term)
	resp, err := r.h.call(ctx, http.MethodGet, u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("snapshot: leader answered %d", resp.StatusCode)
	}
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	if err := r.eng.Restore(resp.Body); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	r.lg.Info("full sync from leader done", zap.String("leader", d.leader), zap.Uint64("last_txn_id", r.eng.LastTxnID()))
	return nil
}

// call sends a body-less request to another storage node.
func (h *Host) call(ctx context.Context, method, u string) (*http.Response, error) {
	return h.send(ctx, method, u, nil)
}

// send sends a request to another storage node: every node-to-node request
// goes through here.
func (h *Host) send(ctx context.Context, method, u string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	return h.client.Do(req)
}
