package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/cairn-db/cairn/config"
	"github.com/cairn-db/cairn/internal/peerauth"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/stretchr/testify/require"
)

// TestPeerProofBoundToNodeID (issue 26): two real nodes with a cluster
// secret replicate with version 3 proofs (bound to the target's node id).
// A process holding the secret that signs for another node id is refused;
// a version 2 proof is refused until a node advertising protocol 2 is live
// (a roll), then accepted, and refused again once it is gone; the sender
// picks version 2 only for the node whose record advertises protocol 2.
// The same for version 1 and a record without a protocol (release 0.1.0).
func TestPeerProofBoundToNodeID(t *testing.T) {
	c := startTestCluster(t, func(cfg *config.Config) { cfg.ClusterSecret = "s3cret" })
	c.createDB("p", 1, 2)
	c.write("p", "cpu,host=a v=1 1700000000000000000\n")

	ctx := context.Background()
	rogue := func(vers func(string) int) *client.Client {
		return client.New(&http.Client{Timeout: 5 * time.Second,
			Transport: peerauth.NewTransport(peerauth.TransportConfig{Secret: "s3cret", ProofVersion: vers})})
	}
	at := c.peer.HTTPAddr()
	status := func(err error) int {
		var pe *client.PeerError
		if errors.As(err, &pe) {
			return pe.Status
		}
		return 0
	}
	_, err := rogue(nil).Txn(ctx, client.Peer{ID: c.peer.NodeID(), Address: at}, "p", []int{0})
	require.NoError(t, err, "signed for the node that answers")
	_, err = rogue(nil).Txn(ctx, client.Peer{ID: c.core.NodeID(), Address: at}, "p", []int{0})
	require.Equal(t, http.StatusUnauthorized, status(err), "signed for another node id, sent to this one: %v", err)
	_, err = rogue(nil).Txn(ctx, client.Peer{Address: at}, "p", []int{0})
	require.ErrorIs(t, err, peerauth.ErrNoTarget, "no node id: not sent")

	require.Equal(t, peerauth.V3, c.core.proofVersion(c.peer.NodeID()))
	require.Equal(t, peerauth.V3, c.core.proofVersion("nobody"), "no record: never downgraded")
	for _, old := range []struct {
		protocol, proof int
		roll            func() bool
	}{{2, peerauth.V2, c.peer.rollFromV2}, {0, peerauth.V1, c.peer.rollFrom010}} {
		signs := func(string) int { return old.proof }
		_, err = rogue(signs).Txn(ctx, client.Peer{ID: c.peer.NodeID(), Address: at}, "p", []int{0})
		require.Equal(t, http.StatusUnauthorized, status(err), "version %d outside a roll: %v", old.proof, err)

		// A node of the older protocol registers (0: release 0.1.0's record,
		// without the field): the roll has begun.
		key := models.ClusterKeys{SNS: c.core.keys.ClusterNamespace(models.StorageCluster{Name: "default"})}.Node("old")
		rec, _ := json.Marshal(models.StorageNode{NodeID: "old", NodeAddress: "127.0.0.1:1", Cluster: "default", Role: "storage", Protocol: old.protocol})
		_, err = c.core.store.Put(ctx, key, rec, 0)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			return old.roll() && c.core.proofVersion("old") == old.proof
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, peerauth.V3, c.core.proofVersion(c.peer.NodeID()), "only the old node gets version %d", old.proof)
		_, err = rogue(signs).Txn(ctx, client.Peer{ID: c.peer.NodeID(), Address: at}, "p", []int{0})
		require.NoError(t, err, "version %d during the roll", old.proof)

		_, err = c.core.store.Delete(ctx, key)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return !old.roll() }, 10*time.Second, 10*time.Millisecond)
		_, err = rogue(signs).Txn(ctx, client.Peer{ID: c.peer.NodeID(), Address: at}, "p", []int{0})
		require.Equal(t, http.StatusUnauthorized, status(err), "version %d after the roll: %v", old.proof, err)
	}

	// Replication kept working with the bound proofs throughout.
	c.write("p", "cpu,host=b v=2 1700000000000000000\n")
}
