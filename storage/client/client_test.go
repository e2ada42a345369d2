package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// leader answers writes as a storage node does: 204 once it decoded the
// entry, or the envelope of refuse.
func leader(t *testing.T, refuse error, got *wire.Entry, path *string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*path = r.URL.Path + "?" + r.URL.RawQuery
		if refuse != nil {
			status, body := models.Envelope(refuse)
			c, _ := gin.CreateTestContext(w)
			c.JSON(status, body)
			return
		}
		data, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		require.NoError(t, got.UnmarshalBinary(data))
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestWriteEncodesTheBatch(t *testing.T) {
	var got wire.Entry
	var path string
	addr := leader(t, nil, &got, &path)
	pts, err := lineproto.Parse([]byte("cpu,host=a v=1 10\ncpu,host=b v=2 20"), "ns", 0)
	require.NoError(t, err)
	c := &client.Client{HTTP: http.DefaultClient}
	require.NoError(t, c.Write(context.Background(), client.Shard{Peer: client.Peer{ID: "n1", Address: addr}, DB: "db", Shard: 3}, 7, pts))
	require.Equal(t, "/internal/v1/shards/db/3/write?term=7", path)
	require.Equal(t, uint64(7), got.Term)
	require.Equal(t, pts, got.Points)
}

// TestWriteRefusalsTyped: the node's refusal is a PeerError wrapping the
// sentinel its code names, so the broker tells a final refusal (too few
// in-sync replicas) from one worth retrying without reading the message.
func TestWriteRefusalsTyped(t *testing.T) {
	cases := []struct {
		refuse error
		want   error
		status int
	}{
		{fmt.Errorf("%w: shard db/0 has 1 in-sync replicas, minimum is 2", storage.ErrNotEnoughISR), models.ErrNotEnoughISR, 503},
		{fmt.Errorf("%w: not leading", storage.ErrStaleTerm), models.ErrStaleTerm, 409},
		{fmt.Errorf("%w: db/0 on n1", storage.ErrNotHosted), models.ErrNotHosted, 404},
		{storage.ErrAckTimeout, models.ErrAckTimeout, 503},
	}
	for _, tc := range cases {
		var path string
		addr := leader(t, tc.refuse, nil, &path)
		c := &client.Client{HTTP: http.DefaultClient}
		err := c.Write(context.Background(), client.Shard{Peer: client.Peer{ID: "n1", Address: addr}, DB: "db"}, 1, nil)
		var peer *client.PeerError
		require.ErrorAs(t, err, &peer)
		require.Equal(t, tc.status, peer.Status)
		require.ErrorIs(t, err, tc.want)
		require.Equal(t, tc.refuse.Error(), err.Error())
		if tc.want != models.ErrNotEnoughISR {
			require.NotErrorIs(t, err, models.ErrNotEnoughISR)
		}
	}
}
