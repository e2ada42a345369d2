package app

import (
	"testing"

	"github.com/cairn-db/cairn/config"
	"github.com/stretchr/testify/require"
)

func TestMemoryLimit(t *testing.T) {
	none := func(string) string { return "" }
	gomem := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "1GiB"
		}
		return ""
	}
	storage := config.Default()
	storage.MemtableMaxBytes = 64 << 20
	broker := config.Default()
	broker.Roles = []string{config.RoleBroker}
	explicit := storage
	explicit.MemoryLimit = 300 << 20
	cases := []struct {
		name   string
		cfg    config.Config
		getenv func(string) string
		want   int64
	}{
		{"storage: three times the memtable budget + 128 MiB", storage, none, 320 << 20},
		{"GOMEMLIMIT set: the runtime's", storage, gomem, 0},
		{"no storage role: none", broker, none, 0},
		{"the flag wins", explicit, gomem, 300 << 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, memoryLimit(tc.cfg, tc.getenv))
		})
	}
	auto := config.Default()
	require.Greater(t, memoryLimit(auto, none), int64(128<<20), "the memtable default is resolved")
}
