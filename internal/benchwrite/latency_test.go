package benchwrite

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLatencyLog: with a latency log, a run writes one line per
// acknowledged batch, in send order, whose latencies are the run's (its
// slowest is the result's max); refused batches have none.
func TestLatencyLog(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1)%4 == 0 {
			http.Error(w, "no", http.StatusBadRequest) // failed, not logged
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	var log bytes.Buffer
	p := Params{URL: srv.URL, DB: "b", Series: 40, Senders: 4, Batch: 10, Fields: "float=1",
		Duration: 200 * time.Millisecond, Precision: "ms", PID: os.Getpid(), LatencyLog: &log}
	require.NoError(t, p.Validate())
	res, err := Run(context.Background(), p)
	require.NoError(t, err)
	require.Positive(t, res.Batches)
	require.Positive(t, res.FailedBatches)

	var lines int64
	prev, slowest := -1.0, 0.0
	sc := bufio.NewScanner(&log)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		require.Len(t, f, 2, sc.Text())
		at, err := strconv.ParseFloat(f[0], 64)
		require.NoError(t, err)
		took, err := strconv.ParseFloat(f[1], 64)
		require.NoError(t, err)
		require.GreaterOrEqual(t, at, prev, "in send order")
		require.GreaterOrEqual(t, at, 0.0)
		prev, slowest = at, max(slowest, took)
		lines++
	}
	require.Equal(t, res.Batches, lines, "one line per acknowledged batch")
	require.InDelta(t, res.MaxMs, slowest, 0.011, "the slowest batch logged is the run's max")
}

// TestLatencyLogOff: without a log a run keeps no send times.
func TestLatencyLogOff(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	p := Params{URL: srv.URL, DB: "b", Series: 10, Senders: 1, Batch: 10, Fields: "float=1",
		Duration: 50 * time.Millisecond, Precision: "ms", PID: os.Getpid()}
	require.NoError(t, p.Validate())
	s := &sender{p: &p, client: srv.Client(), url: srv.URL + "/write"}
	_, err := s.send(context.Background(), []byte("m v=1 1\n"))
	require.NoError(t, err)
	require.Len(t, s.lat, 1)
	require.Empty(t, s.sent)
}
