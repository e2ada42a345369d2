package simcluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// errRefused: no agent serves that address (never started, or killed).
var errRefused = errors.New("simulate cluster: connection refused")

// loopback carries the agents' requests to each other in memory: the target
// agent's real HTTP handlers serve them, without sockets. Every follower
// holds a parked fetch at each node it follows shards of, so 1,000 agents
// would hold ~130,000 sockets in this one process (over its open files
// limit); in memory a parked fetch costs one goroutine. The master's
// questions to the agents still go over TCP.
type loopback struct {
	mu       sync.RWMutex
	handlers map[string]http.Handler // agent address -> its handlers
	counts   *requestCounts          // the requests, by kind (for the progress lines)
}

func newLoopback(counts *requestCounts) *loopback {
	return &loopback{handlers: map[string]http.Handler{}, counts: counts}
}

// requestKind names a request for the counts: the last element of its path
// (fetch, log, txn, ...); RoundTrip counts those answered with another status
// than 2xx once more, with the status (http_log_404).
func requestKind(req *http.Request) string {
	p := req.URL.Path
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		p = p[i+1:]
	}
	return "http_" + p
}

func (l *loopback) serve(addr string, h http.Handler) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handlers[addr] = h
}

func (l *loopback) close(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.handlers, addr)
}

// RoundTrip serves req with the handlers of the agent it is addressed to and
// returns the whole answer once the handler returned.
func (l *loopback) RoundTrip(req *http.Request) (*http.Response, error) {
	kind := requestKind(req)
	l.counts.add(kind) // on arrival: a parked fetch counts while parked
	l.mu.RLock()
	h := l.handlers[req.URL.Host]
	l.mu.RUnlock()
	if h == nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Host, errRefused)
	}
	in := req.Clone(req.Context())
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = "127.0.0.1:1"
	in.Host = req.URL.Host
	if in.Body == nil {
		in.Body = http.NoBody
	}
	w := &recorder{header: http.Header{}}
	h.ServeHTTP(w, in)
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if w.code/100 != 2 {
		l.counts.add(kind + "_" + strconv.Itoa(w.code))
	}
	return &http.Response{Status: http.StatusText(w.code), StatusCode: w.code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.header, Body: io.NopCloser(bytes.NewReader(w.body.Bytes())), ContentLength: int64(w.body.Len()), Request: req}, nil
}

// recorder is the handler's side of an in-memory exchange.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// Flush is a no-op: the answer is handed over whole.
func (r *recorder) Flush() {}
