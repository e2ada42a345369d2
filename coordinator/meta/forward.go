package meta

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/cairn-db/cairn/internal/peerauth"
	"github.com/cairn-db/cairn/models"
)

// Forwarder replays master operations on the elected master's HTTP API, for
// a node that is not master itself. The master's error envelope comes back
// as the sentinel its code names.
type Forwarder struct {
	// Master returns the elected master's record (nil: none elected).
	Master func() *models.MasterRecord
	// Self is this node's id: a record naming it means the term just ended.
	Self string
	// Token is the admin token sent to the master ("" sends none).
	Token  string
	Client *http.Client
}

var _ MasterOps = (*Forwarder)(nil)

// TransferLeader forwards POST .../shards/{id}/leader.
func (f *Forwarder) TransferLeader(ctx context.Context, db string, shard int, t models.LeaderTransfer) error {
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = f.post(ctx, "/api/v1/databases/"+url.PathEscape(db)+"/shards/"+strconv.Itoa(shard)+"/leader", body)
	return err
}

// Rebalance forwards POST /rebalance and decodes the master's plan.
func (f *Forwarder) Rebalance(ctx context.Context, dryRun bool) (models.PlanView, error) {
	var v models.PlanView
	out, err := f.post(ctx, "/api/v1/rebalance?dry_run="+strconv.FormatBool(dryRun), nil)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return v, fmt.Errorf("%w: the master's plan is unreadable: %w", models.ErrUnavailable, err)
	}
	return v, nil
}

// maxAnswer bounds the master's answer read into memory.
const maxAnswer = 32 << 20

func (f *Forwarder) post(ctx context.Context, path string, body []byte) ([]byte, error) {
	rec := f.Master()
	if rec == nil || rec.NodeID == f.Self {
		return nil, fmt.Errorf("%w: no master elected", models.ErrUnavailable)
	}
	// The request is signed for the master's node id (its election value).
	req, err := http.NewRequestWithContext(peerauth.ToNode(ctx, rec.NodeID), http.MethodPost, "http://"+rec.Address+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if f.Token != "" {
		req.Header.Set("Authorization", "Bearer "+f.Token)
	}
	resp, err := f.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: master %s unreachable: %w", models.ErrUnavailable, rec.Address, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("%w: reading master answer: %w", models.ErrUnavailable, err)
	}
	if resp.StatusCode >= 300 {
		return nil, models.DecodeError(out)
	}
	return out, nil
}
