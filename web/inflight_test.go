package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/web"
	"github.com/stretchr/testify/require"
)

// blockingData holds every write until release is closed.
type blockingData struct {
	fakeData
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
}

func (b *blockingData) Write(context.Context, string, string, []byte) error {
	b.entered <- struct{}{}
	<-b.release
	b.mu.Lock()
	b.writes++
	b.mu.Unlock()
	return nil
}

// TestWritesInFlightBounded: while one write holds most of the in-flight
// bound, a second one waits and, past the wait, gets 503 naming the flag
// without reaching the data path; once the first is done, writes go on.
func TestWritesInFlightBounded(t *testing.T) {
	d := &blockingData{entered: make(chan struct{}, 4), release: make(chan struct{})}
	h := web.New(web.Config{State: newState(t), Broker: testBroker{admin: &fakeAdmin{}, data: d}, WriteMaxBodyBytes: 1 << 10,
		WriteMaxInflightBytes: 100, WriteInflightWait: 100 * time.Millisecond}).Handler()
	body := strings.Repeat("m value=1 1\n", 6) // 72 bytes
	first := make(chan int)
	go func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/api/v1/write?db=x", strings.NewReader(body)))
		first <- w.Code
	}()
	<-d.entered

	for _, gz := range []bool{false, true} {
		req := httptest.NewRequest("POST", "/api/v1/write?db=x", strings.NewReader(body))
		if gz {
			// 20 bytes of gzip count 8x: they may inflate that much.
			req = httptest.NewRequest("POST", "/api/v1/write?db=x", strings.NewReader(strings.Repeat("x", 20)))
			req.Header.Set("Content-Encoding", "gzip")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		require.Equal(t, http.StatusServiceUnavailable, w.Code)
		var env models.ErrorBody
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &env))
		require.Equal(t, "unavailable", env.Error.Code)
		require.Contains(t, env.Error.Message, "--write-max-inflight-bytes")
	}

	// A body is charged as it arrives: one that declares no length (or a
	// large one) but is small fits next to the first.
	small := httptest.NewRequest("POST", "/api/v1/write?db=x", strings.NewReader("m value=1 1\n"))
	small.ContentLength = -1
	second := make(chan int)
	go func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, small)
		second <- w.Code
	}()
	<-d.entered

	close(d.release)
	require.Equal(t, http.StatusNoContent, <-first)
	require.Equal(t, http.StatusNoContent, <-second)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/api/v1/write?db=x", strings.NewReader(body)))
	require.Equal(t, http.StatusNoContent, w.Code)
	require.Equal(t, 3, d.writes)
}

// TestWriteWaitsForRoomInFlight: a write past the bound waits, and goes
// through as soon as the write ahead of it is done.
func TestWriteWaitsForRoomInFlight(t *testing.T) {
	d := &blockingData{entered: make(chan struct{}, 4), release: make(chan struct{})}
	h := web.New(web.Config{State: newState(t), Broker: testBroker{admin: &fakeAdmin{}, data: d}, WriteMaxBodyBytes: 1 << 10,
		WriteMaxInflightBytes: 100, WriteInflightWait: time.Minute}).Handler()
	body := strings.Repeat("m value=1 1\n", 6)
	codes := make(chan int, 2)
	send := func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/api/v1/write?db=x", strings.NewReader(body)))
		codes <- w.Code
	}
	go send()
	<-d.entered
	go send()
	select {
	case <-d.entered:
		t.Fatal("the second write reached the data path while the first held the room")
	case <-time.After(50 * time.Millisecond):
	}
	close(d.release)
	<-d.entered
	require.Equal(t, http.StatusNoContent, <-codes)
	require.Equal(t, http.StatusNoContent, <-codes)
}
