package meta_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/coordinator/meta"
	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

// fakeMaster answers as the master's API would: the envelope for err, or
// the body ok.
func fakeMaster(t *testing.T, err error, ok string, seen *http.Request) *meta.Forwarder {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		*seen = *r
		seen.Body = io.NopCloser(strings.NewReader(string(body)))
		if err != nil {
			status, env := models.Envelope(err)
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(env)
			return
		}
		_, _ = io.WriteString(w, ok)
	}))
	t.Cleanup(srv.Close)
	rec := &models.MasterRecord{NodeID: "m1", Address: strings.TrimPrefix(srv.URL, "http://")}
	return &meta.Forwarder{Master: func() *models.MasterRecord { return rec }, Self: "n2", Token: "tok", Client: srv.Client()}
}

// TestForwarderErrors: the master's refusal comes back as the sentinel its
// envelope code names, whatever its status, with the master's message.
func TestForwarderErrors(t *testing.T) {
	for _, c := range models.Codes {
		var seen http.Request
		f := fakeMaster(t, models.Mark(io.EOF, c.Err), "", &seen)
		err := f.TransferLeader(context.Background(), "db", 3, models.LeaderTransfer{NodeID: "n1"})
		require.ErrorIs(t, err, c.Err, c.Code)
		require.Equal(t, io.EOF.Error(), err.Error())
		require.Equal(t, "/api/v1/databases/db/shards/3/leader", seen.URL.Path)
		require.Equal(t, "Bearer tok", seen.Header.Get("Authorization"))
	}
}

func TestForwarderRebalance(t *testing.T) {
	var seen http.Request
	f := fakeMaster(t, nil, `{"dry_run":true,"relocations":1,"lower_bound":1,"moves":[{"kind":"add","db":"db","shard":3,"to":"n2"}],"operators":[]}`, &seen)
	out, err := f.Rebalance(context.Background(), true)
	require.NoError(t, err)
	require.Equal(t, models.PlanView{DryRun: true, Relocations: 1, LowerBound: 1,
		Moves: []models.MoveView{{Kind: "add", DB: "db", Shard: 3, To: "n2"}}, Operators: []models.Operator{}}, out)
	require.Equal(t, "dry_run=true", seen.URL.RawQuery)

	// An answer that is not a plan is the master's fault, said as such.
	f = fakeMaster(t, nil, `<html>`, &seen)
	_, err = f.Rebalance(context.Background(), true)
	require.ErrorIs(t, err, models.ErrUnavailable)
	require.Contains(t, err.Error(), "unreadable")
}

// TestForwarderNoMaster: no master elected, or a record still naming this
// node (its term just ended), is unavailable without a request.
func TestForwarderNoMaster(t *testing.T) {
	f := &meta.Forwarder{Master: func() *models.MasterRecord { return nil }, Client: http.DefaultClient}
	_, err := f.Rebalance(context.Background(), false)
	require.ErrorIs(t, err, models.ErrUnavailable)
	f = &meta.Forwarder{Self: "n1", Master: func() *models.MasterRecord { return &models.MasterRecord{NodeID: "n1", Address: "127.0.0.1:1"} }, Client: http.DefaultClient}
	err = f.TransferLeader(context.Background(), "db", 0, models.LeaderTransfer{NodeID: "n2"})
	require.ErrorIs(t, err, models.ErrUnavailable)
}
