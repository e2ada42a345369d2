package backup

import (
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv/etcdtest"
	"github.com/stretchr/testify/require"
)

// A node's local backup written before kinds were saved by name (version 1,
// kinds as integers) still restores, skipping the live kinds as before.
func TestMainRestoresVersion1StateBackup(t *testing.T) {
	m := etcdtest.Start(t)
	store := m.Store(t)
	code, _, stderr := runMain("restore", "--in", "../../statemachine/testdata/state-v1.backup", "--etcd-endpoints", m.Endpoint)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "1 in-sync records name no etcd cluster")
	requireSame(t, map[string][]byte{
		"storage/config/default": []byte(`{"name":"default"}`),
		"database/config/db1":    []byte(`{"name":"db1","storage_cluster":"default","num_shards":1,"replica_factor":1}`),
		"database/assign/db1":    []byte(`{"db":"db1","cluster":"default","shards":[{"id":0,"replicas":["n1"]}]}`),
		"state/shards/db1":       []byte(`{"db":"db1","shards":[{"id":0,"leader":"n1","term":3,"status":"online"}]}`),
		"drain/n9":               []byte(`{"node_id":"n9"}`),
		// Its in-sync record names no etcd cluster: restored as foreign
		// (models.ForeignCluster), so the shard is re-elected.
		"storage/default/isr/db1/0": []byte(`{"cluster_id":18446744073709551615,"leader":"n1","replicas":["n1"],"term":3}`),
	}, dump(t, store, "/cairn"))
}
