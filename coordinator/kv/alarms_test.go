package kv_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAlarmsFromStatusCostNoRaftEntry: an alarm raised in a real etcd is
// listed once, is gone once disarmed, and listing alarms (every node does
// it each second) adds no entry to etcd's raft log, as the alarm API's GET
// would.
func TestAlarmsFromStatusCostNoRaftEntry(t *testing.T) {
	m := etcdtest.Start(t)
	s := m.Store(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.Endpoint}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	alarms, err := s.Alarms(ctx)
	require.NoError(t, err)
	require.Empty(t, alarms)

	st, err := cli.Status(ctx, m.Endpoint)
	require.NoError(t, err)
	for _, a := range []pb.AlarmType{pb.AlarmType_NOSPACE, pb.AlarmType_CORRUPT} {
		_, err = pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx,
			&pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: st.Header.MemberId, Alarm: a})
		require.NoError(t, err)
	}
	alarms, err = s.Alarms(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"NOSPACE", "CORRUPT"}, alarms)

	before, err := cli.Status(ctx, m.Endpoint)
	require.NoError(t, err)
	for range 20 {
		_, err := s.Alarms(ctx)
		require.NoError(t, err)
	}
	after, err := cli.Status(ctx, m.Endpoint)
	require.NoError(t, err)
	require.Equal(t, before.RaftIndex, after.RaftIndex, "listing alarms went through raft")

	_, err = cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE})
	require.NoError(t, err)
	alarms, err = s.Alarms(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"CORRUPT"}, alarms)
}

// TestAlarmsUseTheClientsConnection: listing alarms (every node does it
// every few seconds) goes over the store's own connection, never a new one
// per call: a proxy in front of a real etcd accepts one connection for a
// store's header probe and twenty listings.
func TestAlarmsUseTheClientsConnection(t *testing.T) {
	m := etcdtest.Start(t)
	target := strings.TrimPrefix(m.Endpoint, "http://")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var accepted atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				_ = dst.Close()
				_ = src.Close()
			}
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	s, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{"http://" + l.Addr().String()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _, err = s.Header(ctx)
	require.NoError(t, err)
	for range 20 {
		alarms, err := s.Alarms(ctx)
		require.NoError(t, err)
		require.Empty(t, alarms)
	}
	require.Equal(t, int64(1), accepted.Load(), "connections opened for a header probe and 20 alarm listings")
}
