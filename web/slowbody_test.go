package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/web"
	"github.com/stretchr/testify/require"
)

// slowWriter opens a write request that declares size bytes and sends 3.
func slowWriter(t *testing.T, addr string, size int) net.Conn {
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "POST /api/v1/write?db=x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nm v", size)
	require.NoError(t, err)
	return conn
}

func startServer(t *testing.T, cfg web.Config) *web.Server {
	cfg.Addr = "127.0.0.1:0"
	s := web.New(cfg)
	require.NoError(t, s.Listen())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
	})
	return s
}

// TestSlowBodiesHoldOnlyWhatTheySent: two senders that declare the whole
// in-flight budget and trickle 3 bytes hold 3 bytes each, so a third
// client's writes go straight through (they would wait a minute if the
// declared lengths were charged).
func TestSlowBodiesHoldOnlyWhatTheySent(t *testing.T) {
	d := &fakeData{}
	s := startServer(t, web.Config{State: newState(t), Broker: testBroker{admin: &fakeAdmin{}, data: d}, WriteMaxBodyBytes: 32 << 20,
		WriteMaxInflightBytes: 64 << 20, WriteInflightWait: time.Minute, WriteBodyTimeout: time.Minute})
	slowWriter(t, s.Addr(), 32<<20)
	slowWriter(t, s.Addr(), 32<<20)
	require.Eventually(t, func() bool { return s.WriteReaders() == 2 }, 5*time.Second, 5*time.Millisecond)

	for range 5 {
		resp, err := http.Post("http://"+s.Addr()+"/api/v1/write?db=x", "text/plain", strings.NewReader("m value=1 1\n"))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
	require.Equal(t, 2, s.WriteReaders(), "the slow writers are still there")
}

// TestSlowBodyLosesItsRequest: a sender that does not finish its body
// within --write-body-timeout gets 400 naming the flag, and its charge is
// released.
func TestSlowBodyLosesItsRequest(t *testing.T) {
	s := startServer(t, web.Config{State: newState(t), Broker: testBroker{admin: &fakeAdmin{}, data: &fakeData{}}, WriteMaxBodyBytes: 1 << 20,
		WriteMaxInflightBytes: 1 << 20, WriteBodyTimeout: 200 * time.Millisecond})
	conn := slowWriter(t, s.Addr(), 1000)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var env models.ErrorBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&env))
	require.Contains(t, env.Error.Message, "--write-body-timeout")
	require.Eventually(t, func() bool { return s.WriteReaders() == 0 }, 5*time.Second, 5*time.Millisecond)
}
