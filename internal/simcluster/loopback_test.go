package simcluster

import (
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The agents' requests to each other are counted by kind as they arrive, and
// once more with the status when not answered 2xx: the progress lines show
// how many per-shard pulls a placement took and how many failed.
func TestLoopbackCountsRequestsByKindAndFailure(t *testing.T) {
	counts := &requestCounts{n: map[string]int64{}}
	l := newLoopback(counts)
	l.serve("a:1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/internal/v1/shards/d/0/log" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	c := &http.Client{Transport: l}
	for _, path := range []string{"/internal/v1/fetch", "/internal/v1/fetch", "/internal/v1/shards/d/0/log"} {
		resp, err := c.Post("http://a:1"+path, "application/octet-stream", nil)
		require.NoError(t, err)
		resp.Body.Close()
	}
	_, err := c.Get("http://b:1/internal/v1/fetch")
	require.ErrorIs(t, err, errRefused)
	require.Equal(t, "http_fetch=3 http_log=1 http_log_404=1", counts.String())
}

// The creates' answer times are shown as their mean and longest.
func TestDurationsMeanAndLongest(t *testing.T) {
	var d durations
	require.Equal(t, "none", d.String())
	for _, x := range []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 110 * time.Millisecond} {
		d.add(x)
	}
	require.Equal(t, "answered in 50ms on average, 110ms at most", d.String())
}

// The CPU time read from /proc/<pid>/stat (how the etcd,master,broker
// process's is counted) is the process's own: it grows as getrusage's does,
// to its 10ms ticks.
func TestProcCPU(t *testing.T) {
	rusage := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, ru0 := procCPU(os.Getpid()), rusage()
	var x uint64
	for rusage()-ru0 < 300*time.Millisecond {
		for i := range 100000 {
			x += uint64(i) * x
		}
	}
	require.NotZero(t, x|1)
	require.GreaterOrEqual(t, procCPU(os.Getpid())-before, 270*time.Millisecond)
	require.Zero(t, procCPU(-1), "no such process")
}
