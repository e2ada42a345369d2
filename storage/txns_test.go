package storage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/internal/peerauth"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/web"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// storageRole is a host as the web server mounts it (web.StorageAPI).
type storageRole struct{ h *storage.Host }

func (s storageRole) Routes(r gin.IRouter) { s.h.Routes(r) }
func (storageRole) WriteFence() error      { return nil }
func (storageRole) FaultInjection() bool   { return false }
func (storageRole) InjectFault(string)     {}

// TestBatchedTxnQuestion: the master's batched failover question
// (POST /internal/v1/txns), served by a real host behind the web server's
// internal guard with a cluster secret: answers for the shards the node
// holds, none for others; refused without a proof or with one made for
// another node; refused past its limits (413) and when malformed (400).
func TestBatchedTxnQuestion(t *testing.T) {
	const secret = "s3cret"
	store, sm := memState(t)
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	h := storage.NewHost(storage.HostConfig{NodeID: "L", Cluster: "default", Engine: eng, Store: store,
		Keys: models.ClusterKeys{SNS: "/t/storage/default"}, State: sm.Snapshot, Changed: sm.Changed,
		AckTimeout: 5 * time.Second, DropDelay: time.Hour})
	srv := httptest.NewServer(web.New(web.Config{NodeID: "L", State: sm.Snapshot, Storage: storageRole{h},
		InternalGuard: peerauth.NewVerifier(peerauth.VerifierConfig{Secret: secret, Node: "L"}).VerifyRequest}).Handler())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.Run(ctx) }()
	defer func() { srv.Close(); cancel(); <-done; _ = eng.Close() }()
	addr := srv.Listener.Addr().String()

	put(sm, statemachine.SourceStorageConfig, statemachine.KindStorageConfig, "", "default", models.StorageCluster{Name: "default"})
	live(t, store, "/t/storage/default", "L", addr)
	for _, db := range []string{"d", "e"} {
		put(sm, statemachine.SourceDatabaseConfig, statemachine.KindDatabaseConfig, "", db,
			models.Database{Name: db, StorageCluster: "default", NumShards: 2, ReplicaFactor: 1, UID: "u-" + db})
		put(sm, statemachine.SourceAssign, statemachine.KindAssign, "", db, models.Assignment{DB: db, Cluster: "default",
			Shards: []models.ShardAssignment{{ID: 0, Replicas: []string{"L"}}, {ID: 1, Replicas: []string{"X"}}}})
		put(sm, statemachine.SourceShardState, statemachine.KindShardState, "", db, models.ShardStates{DB: db,
			Shards: []models.ShardState{{ID: 0, Leader: "L", Term: 3, Status: models.StatusOnline}, {ID: 1, Leader: "X", Term: 1, Status: models.StatusOnline}}})
	}
	require.Eventually(t, func() bool { return h.Write(ctx, "d", 0, 3, points(0, 5)) == nil }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, h.Write(ctx, "d", 0, 3, points(5, 5)))
	require.Eventually(t, func() bool { return h.Write(ctx, "e", 0, 3, points(0, 5)) == nil }, 5*time.Second, 10*time.Millisecond)

	signed := &http.Client{Transport: peerauth.NewTransport(peerauth.TransportConfig{Secret: secret}), Timeout: 5 * time.Second}
	self := client.Peer{ID: "L", Address: addr}
	ask := map[string][]int{"d": {0, 1}, "e": {0}, "gone": {0}}
	got, err := client.New(signed).Txns(ctx, self, ask)
	require.NoError(t, err)
	require.Equal(t, map[string]map[int]models.ReplicaTxn{
		"d": {0: {LastTxnID: 2, LastTerm: 3, Term: 3, SeenTerm: 3}},
		"e": {0: {LastTxnID: 1, LastTerm: 3, Term: 3, SeenTerm: 3}},
	}, got, "answers for the hosted replicas only")
	perDB, err := client.New(signed).Txn(ctx, self, "d", []int{0, 1})
	require.NoError(t, err)
	require.Equal(t, got["d"], perDB, "the per-database question answers the same")

	// More shards than one request takes: the client splits the question.
	many := make([]int, client.MaxTxnsShards+10)
	for i := range many {
		many[i] = i
	}
	got, err = client.New(signed).Txns(ctx, self, map[string][]int{"d": many})
	require.NoError(t, err)
	require.Equal(t, map[string]map[int]models.ReplicaTxn{"d": {0: {LastTxnID: 2, LastTerm: 3, Term: 3, SeenTerm: 3}}}, got)

	// Without the cluster secret's proof, or with one made for another node.
	_, err = client.New(httpClient()).Txns(ctx, self, ask)
	require.ErrorIs(t, err, models.ErrUnauthorized)
	_, err = client.New(signed).Txns(ctx, client.Peer{ID: "M", Address: addr}, ask)
	require.ErrorIs(t, err, models.ErrUnauthorized, "a proof is bound to the node it was made for")

	// The limits and malformed questions, sent as they are.
	tooMany, _ := json.Marshal(client.TxnsRequest{DBs: map[string][]int{"d": many}})
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"too many shards", string(tooMany), http.StatusRequestEntityTooLarge},
		{"too large a body", `{"dbs":{"d":[0` + strings.Repeat(",0", client.MaxTxnsBody/2) + `]}}`, http.StatusRequestEntityTooLarge},
		{"not json", `{"dbs":`, http.StatusBadRequest},
		{"no shard", `{"dbs":{}}`, http.StatusBadRequest},
		{"a bad database name", `{"dbs":{"bad name!":[0]}}`, http.StatusBadRequest},
		{"a negative shard", `{"dbs":{"d":[-1]}}`, http.StatusBadRequest},
	} {
		req, err := http.NewRequestWithContext(peerauth.ToNode(ctx, "L"), http.MethodPost, "http://"+addr+"/internal/v1/txns", bytes.NewReader([]byte(c.body)))
		require.NoError(t, err)
		resp, err := signed.Do(req)
		require.NoError(t, err)
		var env models.ErrorBody
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&env), c.name)
		resp.Body.Close()
		require.Equal(t, c.status, resp.StatusCode, c.name)
		require.NotEmpty(t, env.Error.Message, c.name)
	}
}
