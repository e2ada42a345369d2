package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// problemKinds lists the kinds of /api/v1/problems.
func problemKinds(p *Proc) []string {
	code, body := p.get("/api/v1/problems")
	if code != 200 {
		return nil
	}
	out := []string{} // nil means no answer
	list, _ := body["problems"].([]any)
	for _, it := range list {
		if m, ok := it.(map[string]any); ok {
			out = append(out, m["kind"].(string))
		}
	}
	return out
}

// TestEtcdAlarmIsAProblem: an alarm raised in the real etcd (NOSPACE, as a
// full backend raises it) shows in /api/v1/problems within the probe's
// period, and clears once disarmed.
func TestEtcdAlarmIsAProblem(t *testing.T) {
	args := standaloneArgs(t)
	p := start(t, args...)
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)
	var endpoint string
	for i, a := range args {
		if a == "--etcd-listen-client-url" {
			endpoint = args[i+1]
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cli.Status(ctx, endpoint)
	require.NoError(t, err)
	alarm := &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE}
	_, err = pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, alarm)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		for _, k := range problemKinds(p) {
			if k == "etcd_alarm" {
				return true
			}
		}
		return false
	}, 15*time.Second, 100*time.Millisecond, "NOSPACE never showed as a problem: %v", problemKinds(p))

	_, err = cli.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		kinds := problemKinds(p)
		for _, k := range kinds {
			if k == "etcd_alarm" {
				return false
			}
		}
		return kinds != nil
	}, 15*time.Second, 100*time.Millisecond, "the alarm never cleared")
}
