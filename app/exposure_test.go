package app

import (
	"testing"

	"github.com/cairn-db/cairn/config"
	"github.com/stretchr/testify/require"
)

func surfaces(cfg config.Config) []string {
	var out []string
	for _, e := range exposures(cfg) {
		out = append(out, e.surface)
	}
	return out
}

// TestExposures: a node on loopback warns about nothing; on 0.0.0.0 every
// open surface gets its warning, each closed by its flag, and --insecure
// silences them all.
func TestExposures(t *testing.T) {
	base := config.Default()
	base.Roles = config.AllRoles
	require.Empty(t, surfaces(base), "loopback defaults are quiet")

	open := base
	open.HTTPAddr = "0.0.0.0:9000"
	open.EtcdListenClientURL = "http://0.0.0.0:2379"
	open.EtcdListenPeerURL = "http://10.0.0.5:2380"
	require.Equal(t, []string{"admin_api", "writes", "reads", "internal_api", "etcd_client_plaintext", "etcd_peer_plaintext"}, surfaces(open))

	closed := open
	closed.AdminToken, closed.ClusterSecret = "a", "s"
	closed.EtcdListenClientURL, closed.EtcdListenPeerURL = "https://0.0.0.0:2379", "https://10.0.0.5:2380"
	require.Empty(t, surfaces(closed), "an admin token covers writes and reads (admin > write > read)")

	for _, addr := range []string{":9000", "[::]:9000", "node1.example:9000", "192.168.1.4:9000"} {
		c := closed
		c.HTTPAddr, c.AdminToken = addr, ""
		require.Equal(t, []string{"admin_api", "writes", "reads"}, surfaces(c), addr)
	}
	for _, addr := range []string{"127.0.0.1:9000", "localhost:9000", "[::1]:9000", "127.0.0.2:9000"} {
		c := open
		c.HTTPAddr = addr
		require.NotContains(t, surfaces(c), "admin_api", addr)
	}

	insecure := open
	insecure.Insecure = true
	require.Empty(t, surfaces(insecure))
}
