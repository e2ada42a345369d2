package config

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzParseFlag feeds arbitrary values to every flag: Parse must either
// refuse with a *UsageError or return a Config that validates again
// unchanged, never panic or accept something Validate would refuse.
func FuzzParseFlag(f *testing.F) {
	for _, seed := range []string{"", "standalone", "broker,storage", "/cairn", "127.0.0.1:0", "[::1]:9000",
		"http://127.0.0.1:2379", "3s", "-1s", "default=http://127.0.0.1:2380", "2", "x=y=z", "http://[::1]:1"} {
		f.Add(uint8(0), seed)
	}
	f.Fuzz(func(t *testing.T, idx uint8, value string) {
		o := options[int(idx)%len(options)]
		c, err := Parse([]string{"--" + o.name, value}, envOf(nil), false, io.Discard)
		if err != nil {
			var ue *UsageError
			require.True(t, errors.As(err, &ue), "error %v is not a UsageError", err)
			return
		}
		again := c
		require.NoError(t, again.Validate())
		require.Equal(t, c, again)
	})
}

func BenchmarkParse(b *testing.B) {
	args := []string{"--role", "broker,storage", "--http-addr", "127.0.0.1:9100", "--etcd-endpoints",
		"http://127.0.0.1:2379,http://127.0.0.1:2381", "--lease-ttl", "4s"}
	for b.Loop() {
		if _, err := Parse(args, envOf(nil), false, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
