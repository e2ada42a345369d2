package kv_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/stretchr/testify/require"
)

// heldProxy forwards TCP connections to an etcd member. Once held, it stops
// forwarding what clients send (their flow-control window updates among it)
// and keeps forwarding what etcd sends, so etcd can send a client no more
// than the windows the client announced before.
type heldProxy struct {
	addr string
	mu   sync.Mutex
	held bool
	wake *sync.Cond
}

func startHeldProxy(t *testing.T, target string) *heldProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &heldProxy{addr: l.Addr().String()}
	p.wake = sync.NewCond(&p.mu)
	var conns sync.WaitGroup
	var open []net.Conn
	var openMu sync.Mutex
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		p.held = false
		p.wake.Broadcast()
		p.mu.Unlock()
		openMu.Lock()
		for _, c := range open {
			c.Close()
		}
		openMu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			openMu.Lock()
			open = append(open, c, u)
			openMu.Unlock()
			conns.Add(2)
			go func() { defer conns.Done(); _, _ = io.Copy(c, u); c.Close() }()
			go func() { defer conns.Done(); p.forwardUp(c, u); u.Close() }()
		}
	}()
	return p
}

// forwardUp copies the client's bytes to etcd, waiting while the proxy is
// held.
func (p *heldProxy) forwardUp(c, u net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		p.mu.Lock()
		for p.held {
			p.wake.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := u.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *heldProxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Against a real etcd: a watch is delivered a burst of 1 MiB of changes
// although the client sends etcd nothing after the watch started, no
// window update and no ping. So etcd never waits on the client's reads for
// a burst of that size: a watch that falls behind catches up in one round
// trip instead of one per 64 KiB, gRPC's starting window, which its pings
// widen only as they measure the link. With gRPC's defaults etcd stops
// after 64 KiB here and the watch stays short of the burst.
func TestEtcdStoreWatchTakesABurstWithoutWindowUpdates(t *testing.T) {
	m := etcdtest.Start(t)
	writer := m.Store(t)
	p := startHeldProxy(t, strings.TrimPrefix(m.Endpoint, "http://"))
	s, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{"http://" + p.addr}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rev, err := writer.Put(ctx, "/burst/start", []byte("x"), 0)
	require.NoError(t, err)
	ch := s.Watch(ctx, "/burst/", rev)
	r := <-ch // the watch runs: etcd sent it the first change
	require.NoError(t, r.Err)
	require.Len(t, r.Events, 1)

	p.hold()
	const records, size = 32, 32 << 10
	value := []byte(strings.Repeat("v", size))
	for i := range records {
		_, err := writer.Put(ctx, fmt.Sprintf("/burst/%02d", i), value, 0)
		require.NoError(t, err)
	}
	got := 0
	require.Eventually(t, func() bool {
		for {
			select {
			case r := <-ch:
				require.NoError(t, r.Err)
				got += len(r.Events)
			default:
				return got >= records
			}
		}
	}, 10*time.Second, 5*time.Millisecond, "the burst stalls while the client sends etcd nothing")
}
