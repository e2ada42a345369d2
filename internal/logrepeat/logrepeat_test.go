package logrepeat

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestLimiter(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	now := time.Unix(1000, 0)
	l := New(zap.New(core), 10*time.Second, func() time.Time { return now })

	l.Warn("etcd", "cannot reach etcd", zap.String("endpoint", "e1")) // logged: first time
	for range 5 {
		now = now.Add(time.Second)
		l.Warn("etcd", "cannot reach etcd", zap.String("endpoint", "e1")) // counted
	}
	l.Warn("disk", "disk slow") // another key: logged
	now = now.Add(5 * time.Second)
	l.Warn("etcd", "cannot reach etcd", zap.String("endpoint", "e1")) // 10s after the first: logged with the count

	all := logs.All()
	require.Len(t, all, 3)
	require.Equal(t, "cannot reach etcd", all[0].Message)
	require.NotContains(t, all[0].ContextMap(), "repeated")
	require.Equal(t, "disk slow", all[1].Message)
	require.Equal(t, map[string]any{"endpoint": "e1", "repeated": int64(5), "over": 10 * time.Second}, all[2].ContextMap())
	require.Equal(t, zapcore.WarnLevel, all[2].Level)

	now = now.Add(time.Second)
	l.Warn("etcd", "cannot reach etcd")
	require.Equal(t, 1, l.Reset("etcd"), "one suppressed since the last line")
	l.Info("etcd", "cannot reach etcd") // after Reset: news again
	require.Len(t, logs.All(), 4)
	require.Equal(t, zapcore.InfoLevel, logs.All()[3].Level)
}

func TestLimiterBounded(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	now := time.Unix(0, 0)
	l := New(zap.New(core), time.Hour, func() time.Time { return now })
	for i := range MaxKeys + 10 {
		now = now.Add(time.Millisecond)
		l.Warn("k"+strconv.Itoa(i), "m")
	}
	require.Len(t, l.keys, MaxKeys)
	require.NotContains(t, l.keys, "k0", "the oldest key is forgotten first")
	l.Warn("k0", "m") // forgotten: logs again
	require.Equal(t, MaxKeys+11, logs.Len())
}
