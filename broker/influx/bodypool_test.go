package influx

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// keepingBackend keeps every body it is given, as a write whose points
// still refer to their body would, and fails the bodies that say "fail".
type keepingBackend struct {
	fakeBackend
	kept [][]byte
}

func (k *keepingBackend) Write(_ context.Context, _, _ string, body []byte) error {
	k.kept = append(k.kept, body)
	if bytes.Contains(body, []byte("fail")) {
		return fmt.Errorf("timed out")
	}
	return nil
}

// TestFailedWriteKeepsItsBody: a body whose write failed is never given to
// a later request (its points may still be in a shard's queue), while a
// body whose write succeeded is reused.
func TestFailedWriteKeepsItsBody(t *testing.T) {
	kb := &keepingBackend{}
	srv := serve(t, kb)
	post := func(body string) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/write?db=db", strings.NewReader(body))
		r.ContentLength = int64(len(body))
		srv.ServeHTTP(w, r)
		return w.Code
	}
	failed := "m,host=fail,region=somewhere v=1 1" // longer than the later ones
	require.Equal(t, http.StatusInternalServerError, post(failed))
	for i := range 50 {
		require.Equal(t, http.StatusNoContent, post(fmt.Sprintf("m,host=h%07d v=%d %d", i, i, i)))
	}
	require.Equal(t, failed, string(kb.kept[0]), "the failed write's body was reused")
	if !raceEnabled { // the race detector's pools drop at random
		reused := false
		for _, b := range kb.kept[2:] {
			reused = reused || &b[:1][0] == &kb.kept[1][:1][0]
		}
		require.True(t, reused, "a succeeded write's body is reused")
	}
}

// TestReleasedBodyReadsWhole: a body read into a released buffer holds the
// new request's bytes only, whatever the buffer held before.
func TestReleasedBodyReadsWhole(t *testing.T) {
	read := func(s string) []byte {
		r := httptest.NewRequest(http.MethodPost, "/write", strings.NewReader(s))
		b, err := ReadBody(r, 1<<20)
		require.NoError(t, err)
		return b
	}
	long := read(strings.Repeat("m v=1\n", 100))
	ReleaseBody(long)
	require.Equal(t, "m v=2", string(read("m v=2")))
	ReleaseBody(make([]byte, 0, maxPooledBody+1)) // too large to keep: dropped
	require.Equal(t, "m v=3 3", string(read("m v=3 3")))
}
