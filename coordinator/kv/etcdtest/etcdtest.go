// Package etcdtest starts real embedded etcd members on free loopback ports for
// tests.
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/embedded"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Member is a running embedded member.
type Member struct {
	*embedded.Server
	Endpoint string
}

// Start runs a single-member cluster in t.TempDir(), stopped when t ends.
func Start(t testing.TB) *Member {
	t.Helper()
	var lastErr error
	for range 5 { // a free port can be taken between probe and bind
		cu := fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
		pu := fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
		lg := zap.NewNop()
		if testing.Verbose() {
			lg = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
		}
		s, err := embedded.Start(embedded.Config{
			Name: "test", Dir: t.TempDir() + "/etcd", ListenClientURL: cu, ListenPeerURL: pu,
			Logger: lg, StartTimeout: 20 * time.Second,
		})
		if err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.Close(ctx)
		})
		return &Member{Server: s, Endpoint: cu}
	}
	require.NoError(t, lastErr)
	return nil
}

// Store connects a Store to the member, closed when t ends (before the member).
func (m *Member) Store(t testing.TB) *kv.EtcdStore {
	t.Helper()
	s, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{m.Endpoint}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}
