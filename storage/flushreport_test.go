package storage

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestFlushFailures: a failing flush is logged at ERROR with its shard and
// kept for the node record (bounded, cut short) until the shard flushes again.
func TestFlushFailures(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	f := NewFlushFailures(zap.New(core))
	require.Nil(t, f.Failing())
	f.Report("db", 3, errors.New("engine: flush up to txn 9: disk full"))
	require.Equal(t, map[string]string{"db/3": "engine: flush up to txn 9: disk full"}, f.Failing())
	e := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	require.Len(t, e, 1)
	require.Equal(t, "db", e[0].ContextMap()["db"])
	require.EqualValues(t, 3, e[0].ContextMap()["shard"])
	for i := range 40 {
		f.Report("db", 100+i, errors.New(strings.Repeat("x", 1000)))
	}
	require.Len(t, f.Failing(), maxFlushFailures)
	for _, msg := range f.Failing() {
		require.LessOrEqual(t, len(msg), maxFlushError+3)
	}
	f.Report("db", 3, nil)
	_, still := f.Failing()[fmt.Sprint("db/", 3)]
	require.False(t, still)
}
