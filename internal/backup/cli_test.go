package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

func runMain(cmd string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(cmd, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestMainBackupAndRestore(t *testing.T) {
	src := etcdtest.Start(t)
	want := seed(t, src.Store(t), "/cairn")
	dir := t.TempDir()
	file := filepath.Join(dir, "cairn.backup")

	code, _, stderr := runMain("backup", "--etcd-endpoints", src.Endpoint)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--out")

	code, _, stderr = runMain("backup", "--out", file, "--etcd-endpoints", src.Endpoint)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, fmt.Sprintf("%d keys", len(want)))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "the temp file was renamed into place")

	// "-" streams the same backup to stdout.
	code, stdout, stderr := runMain("backup", "--out", "-", "--etcd-endpoints", src.Endpoint)
	require.Equal(t, 0, code, stderr)
	require.NoError(t, verifyChecksum([]byte(stdout)))

	dst := etcdtest.Start(t)
	// The endpoint from the environment, as for a node.
	t.Setenv("CAIRN_ETCD_ENDPOINTS", dst.Endpoint)
	t.Setenv("CAIRN_NAMESPACE", "/restored")
	code, _, stderr = runMain("restore", "--in", file)
	require.Equal(t, 0, code, stderr)
	requireSame(t, want, dump(t, dst.Store(t), "/restored"))

	code, _, stderr = runMain("restore", "--in", file)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "not empty")
	require.Contains(t, stderr, "--force")

	code, _, stderr = runMain("restore", "--in", file, "--force")
	require.Equal(t, 0, code, stderr)
	requireSame(t, want, dump(t, dst.Store(t), "/restored"))

	// A flag beats the environment.
	code, _, stderr = runMain("restore", "--in", file, "--namespace", "/flagged")
	require.Equal(t, 0, code, stderr)
	requireSame(t, want, dump(t, dst.Store(t), "/flagged"))
}

func TestMainExitCodes(t *testing.T) {
	m := etcdtest.Start(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	code, _, stderr := runMain("backup", "--out", good, "--etcd-endpoints", m.Endpoint)
	require.Equal(t, 0, code, stderr)
	data, err := os.ReadFile(good)
	require.NoError(t, err)
	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, data[:len(data)-10], 0o600))
	free := fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))

	cases := []struct {
		name   string
		cmd    string
		args   []string
		code   int
		stderr string
	}{
		{"unknown command", "backpu", nil, 2, `"backpu"`},
		{"missing --in", "restore", []string{"--etcd-endpoints", m.Endpoint}, 2, "--in"},
		{"unknown flag", "backup", []string{"--out", good, "--bogus"}, 2, "bogus"},
		{"bad timeout", "backup", []string{"--out", good, "--timeout", "soon"}, 2, "soon"},
		{"stray argument", "backup", []string{"--out", good, "extra"}, 2, `"extra"`},
		{"truncated file", "restore", []string{"--in", bad, "--etcd-endpoints", m.Endpoint}, 2, bad},
		{"missing file", "restore", []string{"--in", filepath.Join(dir, "nope"), "--etcd-endpoints", m.Endpoint}, 2, "nope"},
		{"unwritable out", "backup", []string{"--out", filepath.Join(dir, "no", "dir", "f"), "--etcd-endpoints", m.Endpoint}, 2, "no/dir"},
		{"etcd unreachable", "backup", []string{"--out", filepath.Join(dir, "x"), "--etcd-endpoints", free, "--timeout", "1s"}, 1, "unavailable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runMain(c.cmd, c.args...)
			require.Equal(t, c.code, code, stderr)
			require.Contains(t, stderr, c.stderr)
		})
	}
	_, err = os.Stat(filepath.Join(dir, "x"))
	require.ErrorIs(t, err, os.ErrNotExist, "a failed backup leaves no file")
	kvs, _, err := m.Store(t).List(context.Background(), "/")
	require.NoError(t, err)
	require.Empty(t, kvs, "the refused restores wrote nothing")
}

// stateBackup is what a node saves locally: raw keys per watched source.
func stateBackup(ns string) statemachine.BackupFile {
	kv := func(key, value string) statemachine.BackupKV {
		return statemachine.BackupKV{Key: ns + key, Value: json.RawMessage(value), ModRev: 5, CreateRev: 4}
	}
	src := func(kind statemachine.Kind, cluster string, kvs ...statemachine.BackupKV) statemachine.BackupSource {
		return statemachine.BackupSource{Prefix: ns + "/", Kind: kind, Cluster: cluster, Rev: 9, KVs: kvs}
	}
	return statemachine.BackupFile{Format: statemachine.BackupFormat, Version: statemachine.BackupVersion, SavedAt: 1,
		Sources: map[string]statemachine.BackupSource{
			"master":  src(statemachine.KindMaster, "", kv("/master/node", `{"node_id":"m1","term":3}`)),
			"brokers": src(statemachine.KindBrokers, "", kv("/live/brokers/b1", `{"node_id":"b1"}`)),
			"storage_config": src(statemachine.KindStorageConfig, "",
				kv("/storage/config/default", `{"name":"default","etcd_endpoints":[],"namespace":""}`),
				kv("/storage/config/east", `{"name":"east","etcd_endpoints":["http://10.1.1.1:2379"],"namespace":"/cairn"}`)),
			"database_config": src(statemachine.KindDatabaseConfig, "", kv("/database/config/db1", `{"name":"db1","num_shards":2}`)),
			"assign":          src(statemachine.KindAssign, "", kv("/database/assign/db1", `{"db":"db1","shards":[{"id":0,"replicas":["n1"]}]}`)),
			"shard_state":     src(statemachine.KindShardState, "", kv("/state/shards/db1", `{"db":"db1","shards":[{"id":0,"leader":"n1","term":12,"status":"online"}]}`)),
			"drain":           src(statemachine.KindDrain, ""),
			"nodes/default":   src(statemachine.KindStorageNodes, "default", kv("/storage/default/live/nodes/n1", `{"node_id":"n1"}`)),
			"isr/default":     src(statemachine.KindISR, "default", kv("/storage/default/isr/db1/0", `{"leader":"n1","term":12,"replicas":["n1"]}`)),
			// east has its own etcd: these keys came from there, not from ours.
			"isr/east": src(statemachine.KindISR, "east", kv("/isr/db2/0", `{"leader":"e1","term":1,"replicas":["e1"]}`)),
		}}
}

func TestMainRestoresNodeStateBackup(t *testing.T) {
	m := etcdtest.Start(t)
	store := m.Store(t)
	path := filepath.Join(t.TempDir(), "state.backup")
	require.NoError(t, statemachine.WriteFileAtomic(path, stateBackup("/cairn")))

	code, _, stderr := runMain("restore", "--in", path, "--etcd-endpoints", m.Endpoint)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, `"east"`)
	requireSame(t, map[string][]byte{
		"storage/config/default":    []byte(`{"name":"default","etcd_endpoints":[],"namespace":""}`),
		"storage/config/east":       []byte(`{"name":"east","etcd_endpoints":["http://10.1.1.1:2379"],"namespace":"/cairn"}`),
		"database/config/db1":       []byte(`{"name":"db1","num_shards":2}`),
		"database/assign/db1":       []byte(`{"db":"db1","shards":[{"id":0,"replicas":["n1"]}]}`),
		"state/shards/db1":          []byte(`{"db":"db1","shards":[{"id":0,"leader":"n1","term":12,"status":"online"}]}`),
		"storage/default/isr/db1/0": []byte(`{"cluster_id":18446744073709551615,"leader":"n1","replicas":["n1"],"term":12}`),
	}, dump(t, store, "/cairn"))

	// Restored into another namespace its absolute keys do not fit: refused,
	// naming the key, and nothing written.
	code, _, stderr = runMain("restore", "--in", path, "--etcd-endpoints", m.Endpoint, "--namespace", "/other")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `"/cairn/`)
	require.Empty(t, dump(t, store, "/other"))

	// A damaged state backup is refused like a damaged backup.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data[:len(data)/2], 0o600))
	code, _, stderr = runMain("restore", "--in", path, "--etcd-endpoints", m.Endpoint, "--namespace", "/other")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "corrupt")
	require.Empty(t, dump(t, store, "/other"))
}
