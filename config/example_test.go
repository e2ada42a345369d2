package config

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExampleParsesToDefaults: the example config names every key and, read
// back through Parse, gives exactly the defaults.
func TestExampleParsesToDefaults(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, WriteExample(&b))
	text := b.String()
	for _, o := range options {
		require.Regexp(t, `(?m)^(# )?`+o.name+` = `, text, "key %s missing from the example", o.name)
		require.Contains(t, text, o.help, "key %s has no comment", o.name)
	}
	path := filepath.Join(t.TempDir(), "cairn.toml")
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o600))
	noEnv := func(string) (string, bool) { return "", false }
	fromFile, err := Parse([]string{"--config", path}, noEnv, false, io.Discard)
	require.NoError(t, err)
	defaults, err := Parse(nil, noEnv, false, io.Discard)
	require.NoError(t, err)
	require.Equal(t, path, fromFile.ConfigFile)
	fromFile.ConfigFile = ""
	require.Equal(t, defaults, fromFile)

	// Uncommenting a key works: the placeholders are valid TOML of the
	// right type, and the value takes effect.
	edited := strings.Replace(text, `# advertise-addr = ""`, `advertise-addr = "10.0.0.7:9000"`, 1)
	require.NoError(t, os.WriteFile(path, []byte(edited), 0o600))
	c, err := Parse([]string{"--config", path}, noEnv, false, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.7:9000", c.AdvertiseAddr)
}
