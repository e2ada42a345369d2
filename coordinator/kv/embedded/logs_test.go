package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestCairnFlags(t *testing.T) {
	for in, want := range map[string]string{
		"please set a value for --name. Note":                                  "please set a value for --etcd-name. Note",
		"--initial-cluster-state must be new":                                  "--etcd-cluster-state must be new",
		"forgot to set --initial-cluster?":                                     "forgot to set --etcd-initial-cluster?",
		"--initial-advertise-peer-urls \"x\" must be":                          "--etcd-advertise-peer-url \"x\" must be",
		"--advertise-client-urls is required when --listen-client-urls is set": "--etcd-advertise-client-url is required when --etcd-listen-client-url is set",
		"no flags here": "no flags here",
	} {
		require.Equal(t, want, CairnFlags(in))
	}
}

func TestEtcdCore(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	lg, closing := wrapLogger(zap.New(core, zap.AddStacktrace(zapcore.ErrorLevel)))
	closed := fmt.Errorf("accept tcp 127.0.0.1:1: %w", net.ErrClosed)

	lg.Error("setting up serving from embedded etcd failed.", zap.Error(closed))
	lg.Warn("it isn't recommended to use default name, please set a value for --name.", zap.String("hint", "--initial-cluster"))
	lg.Warn("Running http and grpc server on single port. This is not recommended for production.")
	closing.Store(true)
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(closed))
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("mux: server closed")))
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("mux: listener closed")))
	lg.Warn("stopping insecure grpc server due to error", zap.Error(closed))
	lg.Error("setting up serving from embedded etcd failed.", zap.Error(errors.New("disk on fire")))
	lg.Error("some other failure", zap.Error(closed))

	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Level.String()+": "+e.Message)
	}
	require.Equal(t, []string{
		"error: setting up serving from embedded etcd failed.", // before Close: a real failure
		"warn: it isn't recommended to use default name, please set a value for --etcd-name.",
		"error: setting up serving from embedded etcd failed.", // not a closed listener: kept
		"error: some other failure",                            // not a shutdown message: kept
	}, got)
	require.Equal(t, "--etcd-initial-cluster", logs.All()[1].ContextMap()["hint"])
	require.NotEmpty(t, logs.All()[0].Stack, "kept errors keep their stack")
}

// TestMemberStopsQuietly starts and stops a real member: no line at error
// level, and its warnings name Cairn's flags.
func TestMemberStopsQuietly(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		return "http://" + l.Addr().String()
	}
	s, err := Start(Config{Name: "default", Dir: t.TempDir() + "/etcd", ListenClientURL: free(), ListenPeerURL: free(),
		Logger: zap.New(core), StartTimeout: 20 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.Close(ctx)

	sawShutdownNoise := false
	for _, e := range logs.All() {
		require.Less(t, e.Level, zapcore.ErrorLevel, "%s: %s %v", e.Level, e.Message, e.ContextMap())
		require.NotContains(t, e.Message, "--name", "etcd's flag name leaked")
		if e.Level == zapcore.WarnLevel {
			require.False(t, quietWarnings[e.Message], e.Message)
		}
		sawShutdownNoise = sawShutdownNoise || shutdownMessages[e.Message]
	}
	require.True(t, sawShutdownNoise, "etcd's shutdown lines are kept at debug, not dropped")
	found := false
	for _, e := range logs.FilterMessageSnippet("--etcd-name").All() {
		found = found || strings.Contains(e.Message, "default name")
	}
	require.True(t, found, "the default-name warning names --etcd-name")
}
