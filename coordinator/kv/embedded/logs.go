package embedded

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// etcd's log lines are written for etcd's own command line. Cairn wraps its
// core so that an operator reading them sees Cairn's world:
//
//   - flag names are Cairn's (--etcd-name, not --name); etcd flags Cairn does
//     not expose are named as settings Cairn makes itself;
//   - the errors every member logs while it stops (its listeners closing
//     under its own servers) are expected during Close, so they are logged
//     at debug then, and only then;
//   - a fresh member may try to record its storage version before its first
//     term is on disk; etcd retries it a few seconds later, so that error
//     is info;
//   - warnings about choices Cairn made on the operator's behalf (one port
//     for gRPC and HTTP, simple auth tokens while auth is off) are debug:
//     nothing in Cairn's configuration could act on them.

// flagNames maps etcd flags to Cairn's, longest first so that a flag that is
// a prefix of another (--name, --initial-cluster) never shadows it.
var flagNames = strings.NewReplacer(
	"--initial-advertise-peer-urls", "--etcd-advertise-peer-url",
	"--listen-client-http-urls", "etcd's listen-client-http-urls (Cairn serves gRPC and HTTP on --etcd-listen-client-url)",
	"--advertise-client-urls", "--etcd-advertise-client-url",
	"--initial-cluster-state", "--etcd-cluster-state",
	"--initial-cluster-token", "etcd's initial-cluster-token (set by Cairn)",
	"--listen-client-urls", "--etcd-listen-client-url",
	"--listen-peer-urls", "--etcd-listen-peer-url",
	"--initial-cluster", "--etcd-initial-cluster",
	"--quota-backend-bytes", "--etcd-quota-backend-bytes",
	"--peer-client-cert-auth", "--etcd-peer-client-cert-auth",
	"--peer-trusted-ca-file", "--etcd-peer-trusted-ca-file",
	"--peer-cert-file", "--etcd-peer-cert-file",
	"--peer-key-file", "--etcd-peer-key-file",
	"--client-cert-auth", "--etcd-client-cert-auth",
	"--trusted-ca-file", "--etcd-trusted-ca-file",
	"--cert-file", "--etcd-cert-file",
	"--key-file", "--etcd-key-file",
	"--data-dir", "--data-dir (etcd keeps <data-dir>/etcd)",
	"--name", "--etcd-name",
)

// CairnFlags rewrites etcd flag names in s into Cairn's.
func CairnFlags(s string) string {
	if !strings.Contains(s, "--") {
		return s
	}
	return flagNames.Replace(s)
}

// quietWarnings are etcd warnings about settings Cairn chose; see above.
var quietWarnings = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

// shutdownMessages are logged by etcd's serving goroutines when their
// listeners close; during Close that is the expected end, not a failure.
var shutdownMessages = map[string]bool{
	"setting up serving from embedded etcd failed.": true,
	"stopping insecure grpc server due to error":    true,
	"stopped insecure grpc server due to error":     true,
	"stopping secure grpc server due to error":      true,
	"stopped secure grpc server due to error":       true,
}

// closedError reports whether err is what a server returns once its
// listener was closed under it. cmux says "mux: server closed" or, when
// the member stops before its serving goroutine got to accept, "mux:
// listener closed"; gRPC says "grpc: the server has been stopped".
func closedError(err error) bool {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "use of closed network connection") || strings.Contains(msg, "mux: server closed") ||
		strings.Contains(msg, "mux: listener closed") ||
		strings.Contains(msg, "grpc: the server has been stopped")
}

// etcdCore wraps the core behind etcd's logger.
type etcdCore struct {
	zapcore.Core
	closing *atomic.Bool
}

// wrapLogger returns lg for etcd and the flag that Close sets before it
// stops the member.
func wrapLogger(lg *zap.Logger) (*zap.Logger, *atomic.Bool) {
	closing := &atomic.Bool{}
	return lg.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return &etcdCore{Core: c, closing: closing} })), closing
}

func (c *etcdCore) With(fields []zapcore.Field) zapcore.Core {
	return &etcdCore{Core: c.Core.With(fields), closing: c.closing}
}

// Check admits every entry the inner core would, plus debug candidates are
// decided in Write: an entry is demoted there, never promoted.
func (c *etcdCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c *etcdCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	if ent.Level > zapcore.InfoLevel && errorContains(fields, "missing term information") {
		ent.Level, ent.Stack = zapcore.InfoLevel, ""
		ent.Message += " yet (a new member's first term is not on disk; etcd retries)"
	}
	if c.demote(ent, fields) {
		ent.Level, ent.Stack = zapcore.DebugLevel, ""
	}
	if !c.Core.Enabled(ent.Level) {
		return nil
	}
	ent.Message = CairnFlags(ent.Message)
	out := fields
	for i, f := range fields {
		if f.Type != zapcore.StringType {
			continue
		}
		if s := CairnFlags(f.String); s != f.String {
			if &out[0] == &fields[0] {
				out = append([]zapcore.Field(nil), fields...) // the caller's slice stays as it was
			}
			out[i].String = s
		}
	}
	return c.Core.Write(ent, out)
}

func (c *etcdCore) demote(ent zapcore.Entry, fields []zapcore.Field) bool {
	if ent.Level == zapcore.WarnLevel && quietWarnings[ent.Message] {
		return true
	}
	if !c.closing.Load() || !shutdownMessages[ent.Message] {
		return false
	}
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType {
			return closedError(err)
		}
	}
	return false
}

func errorContains(fields []zapcore.Field, s string) bool {
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType && strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}

// flagError rewrites etcd flag names in an error etcd returned, keeping the
// error itself for errors.Is.
type flagError struct{ err error }

func (e flagError) Error() string { return CairnFlags(e.err.Error()) }
func (e flagError) Unwrap() error { return e.err }
