package web

import (
	"log"
	"strings"
	"time"

	"github.com/cairn-db/cairn/internal/logrepeat"
	"go.uber.org/zap"
)

// serverErrors turns net/http's own log lines (TLS handshake failures,
// accept errors, panics it recovers) into structured, rate-limited log
// entries: a scanner or a client with a bad certificate must not flood the
// log, yet its first failure is visible.
type serverErrors struct {
	lim *logrepeat.Limiter
}

// newServerErrorLog is the http.Server's ErrorLog.
func newServerErrorLog(lg *zap.Logger) *log.Logger {
	return log.New(&serverErrors{lim: logrepeat.New(lg, time.Minute, nil)}, "", 0)
}

func (w *serverErrors) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	kind, remote, cause := "http_server", "", line
	// "http: TLS handshake error from 1.2.3.4:5678: remote error: tls: bad certificate"
	if rest, ok := strings.CutPrefix(line, "http: TLS handshake error from "); ok {
		kind = "tls_handshake"
		if i := strings.Index(rest, ": "); i >= 0 {
			remote, cause = rest[:i], rest[i+2:]
		}
	}
	// One line a minute per kind of failure, with how many were dropped.
	w.lim.Warn(kind+" "+cause, "http server error (rate limited: one line a minute per cause)",
		zap.String("kind", kind), zap.String("remote", remote), zap.String("cause", cause))
	return len(p), nil
}
