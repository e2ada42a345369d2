package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func TestLoadOrCreateNodeIDStable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not", "yet", "there")

	first, err := LoadOrCreateNodeID(dir, "")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^n-[0-9a-f]{12}$`), first)
	require.True(t, ValidName(first))

	second, err := LoadOrCreateNodeID(dir, "")
	require.NoError(t, err)
	require.Equal(t, first, second, "the id survives a restart")

	data, err := os.ReadFile(filepath.Join(dir, NodeIDFile))
	require.NoError(t, err)
	require.Equal(t, first+"\n", string(data))

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temp file left behind")

	other, err := LoadOrCreateNodeID(t.TempDir(), "")
	require.NoError(t, err)
	require.NotEqual(t, first, other, "fresh data dirs get distinct ids")
}

func TestLoadOrCreateNodeIDExplicit(t *testing.T) {
	dir := t.TempDir()
	id, err := LoadOrCreateNodeID(dir, "storage-1")
	require.NoError(t, err)
	require.Equal(t, "storage-1", id)

	id, err = LoadOrCreateNodeID(dir, "")
	require.NoError(t, err)
	require.Equal(t, "storage-1", id, "an explicit id is remembered for later starts without --node-id")

	_, err = LoadOrCreateNodeID(dir, "storage-2")
	var ue *UsageError
	require.ErrorAs(t, err, &ue)
	require.Contains(t, ue.Msg, `"storage-2"`)
	require.Contains(t, ue.Msg, `"storage-1"`)

	_, err = LoadOrCreateNodeID(t.TempDir(), "bad id")
	require.ErrorAs(t, err, &ue)
	require.Contains(t, ue.Msg, `invalid --node-id "bad id"`)

	_, err = LoadOrCreateNodeID(t.TempDir(), strings.Repeat("x", 65))
	require.ErrorAs(t, err, &ue)

	id, err = LoadOrCreateNodeID("", "memory-only")
	require.NoError(t, err)
	require.Equal(t, "memory-only", id)
}

func TestLoadOrCreateNodeIDCorruptFile(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, NodeIDFile), []byte("not an id\n"), 0o644))
	_, err := LoadOrCreateNodeID(dir, "")
	require.Error(t, err)
	require.Contains(t, err.Error(), NodeIDFile)
	require.Contains(t, err.Error(), `"not an id"`)
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger("info", "json", zapcore.AddSync(&buf))
	require.NoError(t, err)
	log.Debug("hidden")
	log.Info("shown", zap.String("node_id", "n1"))
	require.NoError(t, log.Sync())

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1, "debug is below info")
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &rec))
	require.Equal(t, "shown", rec["msg"])
	require.Equal(t, "info", rec["level"])
	require.Equal(t, "n1", rec["node_id"])

	buf.Reset()
	log, err = newLogger("debug", "console", zapcore.AddSync(&buf))
	require.NoError(t, err)
	log.Debug("details")
	require.Contains(t, buf.String(), "DEBUG")
	require.Contains(t, buf.String(), "details")

	_, err = NewLogger("loud", "json")
	var ue *UsageError
	require.ErrorAs(t, err, &ue)
	require.Contains(t, ue.Msg, `"loud"`)

	_, err = NewLogger("info", "xml")
	require.ErrorAs(t, err, &ue)
	require.Contains(t, ue.Msg, `"xml"`)

	log, err = NewLogger("warn", "console")
	require.NoError(t, err)
	require.NotNil(t, log)
}
