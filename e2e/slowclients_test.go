package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSlowWritersDoNotBlockOthers (issue 26 #3): two writers that declare
// 32 MiB bodies (together the node's whole 64 MiB in-flight budget) and send
// 3 bytes do not delay a third client's writes by more than a second; past
// --write-body-timeout they get 400 and lose their connections.
func TestSlowWritersDoNotBlockOthers(t *testing.T) {
	p := start(t, append(standaloneArgs(t), "--write-body-timeout", "3s")...)
	p.waitStatus("/api/v1/ready", 200, 20*time.Second)
	code, body := p.post("/api/v1/databases", map[string]any{"name": "slow", "num_shards": 1, "replica_factor": 1})
	require.Equal(t, 201, code, "%v", body)
	writeURL := "http://" + p.addr + "/api/v1/write?db=slow"
	require.Eventually(t, func() bool {
		code, _, err := postData(p.client, writeURL, []byte("m value=1 1\n"))
		return err == nil && code == http.StatusNoContent
	}, 20*time.Second, 50*time.Millisecond, "the database never took a write")

	answers := make(chan string, 2)
	begin := time.Now()
	for range 2 {
		conn, err := net.Dial("tcp", p.addr)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		_, err = fmt.Fprintf(conn, "POST /api/v1/write?db=slow HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nm v", 32<<20)
		require.NoError(t, err)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				answers <- err.Error()
				return
			}
			resp.Body.Close()
			answers <- resp.Status
		}()
	}

	// Write until both slow writers have been answered: every write, the
	// ones while they hold their requests included, takes under a second.
	var writes, slowest = 0, time.Duration(0)
	for got := 0; got < 2; {
		select {
		case a := <-answers:
			require.Equal(t, "400 Bad Request", a)
			got++
			continue
		default:
		}
		t0 := time.Now()
		code, msg, err := postData(p.client, writeURL, fmt.Appendf(nil, "m value=%d %d\n", writes, writes+2))
		took := time.Since(t0)
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, code, msg)
		require.Less(t, took, time.Second, "a write waited behind the slow writers")
		slowest = max(slowest, took)
		writes++
	}
	held := time.Since(begin)
	require.GreaterOrEqual(t, held, 3*time.Second, "the slow writers were cut before --write-body-timeout")
	require.Less(t, held, 10*time.Second)
	t.Logf("%d writes while two slow writers held 32 MiB requests for %s; slowest write %s", writes, held.Round(time.Millisecond), slowest)
}
