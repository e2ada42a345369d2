package kv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// The one wrapper records every unary request's latency against a real etcd,
// and counts failures against an endpoint nobody serves.
func TestEtcdMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := kv.NewEtcdMetrics(reg)
	member := etcdtest.Start(t)
	s, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{member.Endpoint}, Metrics: m})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	_, err = s.Put(ctx, "/k", []byte("v"), 0)
	require.NoError(t, err)
	_, err = s.Get(ctx, "/k")
	require.NoError(t, err)
	ok, _, err := s.Txn(ctx, []kv.Cmp{kv.ValueIs("/k", []byte("v"))}, []kv.Op{kv.OpDelete("/k")})
	require.NoError(t, err)
	require.True(t, ok)

	require.Equal(t, 1, histCount(t, reg, "put"))
	require.Equal(t, 1, histCount(t, reg, "get"))
	require.Equal(t, 1, histCount(t, reg, "txn"))
	require.Equal(t, 0, histCount(t, reg, "list"))
	require.Zero(t, errCount(t, reg, "get"))

	dead, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))},
		Metrics: m, DialTimeout: 200 * time.Millisecond, RequestTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dead.Close() })
	_, err = dead.Get(ctx, "/k")
	require.ErrorIs(t, err, kv.ErrUnavailable)
	_, err = dead.Put(ctx, "/k", nil, 0)
	require.ErrorIs(t, err, kv.ErrUnavailable)
	require.Equal(t, 1.0, errCount(t, reg, "get"))
	require.Equal(t, 1.0, errCount(t, reg, "put"))
	require.Equal(t, 2, histCount(t, reg, "get"), "failed requests are timed too")

	// A caller giving up is not an etcd error.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = dead.Get(cctx, "/k")
	require.Error(t, err)
	require.Equal(t, 1.0, errCount(t, reg, "get"))
}

func family(t *testing.T, reg *prometheus.Registry, name, op string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" && l.GetValue() == op {
					return m
				}
			}
		}
	}
	require.FailNow(t, "no series", "%s{operation=%q}", name, op)
	return nil
}

func histCount(t *testing.T, reg *prometheus.Registry, op string) int {
	return int(family(t, reg, "cairn_etcd_request_duration_seconds", op).GetHistogram().GetSampleCount())
}

func errCount(t *testing.T, reg *prometheus.Registry, op string) float64 {
	return family(t, reg, "cairn_etcd_request_errors_total", op).GetCounter().GetValue()
}
