package statemachine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

// Every row of the registry is complete, names are unique, and the sources
// built from it are the ones the rest of Cairn names.
func TestKindRegistry(t *testing.T) {
	names := map[string]bool{}
	for k := range numKinds {
		spec := kinds[k]
		require.NotEmpty(t, spec.name, "kind %d", k)
		require.False(t, names[spec.name], "kind name %q repeated", spec.name)
		names[spec.name] = true
		require.NotNil(t, spec.decode, spec.name)
		require.NotNil(t, spec.reduce, spec.name)
		require.True(t, (spec.prefix == nil) != (spec.clusterPrefix == nil), "%s: a main or a cluster kind", spec.name)
		require.Equal(t, spec.clusterPrefix != nil, spec.drop != nil, "%s: a cluster kind forgets a removed cluster", spec.name)
		got, ok := KindByName(spec.name)
		require.True(t, ok)
		require.Equal(t, k, got)
	}
	for _, name := range legacyKinds {
		_, ok := KindByName(name)
		require.True(t, ok, "legacy kind %q must stay readable", name)
	}
	store := kv.NewMemoryStore()
	defer store.Close()
	main := MainSources(store, models.Keys{NS: "/cairn"})
	require.Equal(t, []string{SourceMaster, SourceBrokers, SourceStorageConfig, SourceDatabaseConfig, SourceAssign, SourceShardState, SourceDrain},
		sourceNames(main))
	require.Equal(t, "/cairn/database/config/", main[3].Prefix)
	cl := ClusterSources(store, "c1", models.ClusterKeys{SNS: "/cairn/storage/c1"})
	require.Equal(t, []string{ClusterNodesSource("c1"), ClusterISRSource("c1")}, sourceNames(cl))
	for _, src := range cl {
		require.True(t, src.Kind.ClusterScoped())
		require.Equal(t, "c1", src.Cluster)
	}
}

func sourceNames(srcs []Source) []string {
	out := make([]string, len(srcs))
	for i, s := range srcs {
		out[i] = s.Name
	}
	return out
}

func TestKindJSON(t *testing.T) {
	b, err := json.Marshal(KindStorageNodes)
	require.NoError(t, err)
	require.JSONEq(t, `"storage_nodes"`, string(b))
	var k Kind
	require.NoError(t, json.Unmarshal([]byte(`"isr"`), &k))
	require.Equal(t, KindISR, k)
	require.NoError(t, json.Unmarshal([]byte(`7`), &k), "version 1 saved integers")
	require.Equal(t, KindStorageNodes, k)
	for _, bad := range []string{`"nope"`, `9`, `-1`, `1.5`, `null`, `{}`} {
		require.Error(t, json.Unmarshal([]byte(bad), &k), bad)
	}
	_, err = json.Marshal(Kind(99))
	require.Error(t, err)
}

// A backup written by the version that saved kinds as integers still loads,
// and is saved again with kinds by name.
func TestBackupVersion1StillLoads(t *testing.T) {
	data, err := os.ReadFile("testdata/state-v1.backup")
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "state.backup")
	require.NoError(t, os.WriteFile(path, data, 0o600))

	f, err := ReadBackupFile(path)
	require.NoError(t, err)
	require.Equal(t, 1, f.Version)
	require.Equal(t, KindStorageNodes, f.Sources["nodes/default"].Kind)
	require.Equal(t, KindISR, f.Sources["isr/default"].Kind)
	require.Equal(t, KindDatabaseConfig, f.Sources["databases"].Kind)

	m := New(Config{BackupPath: path})
	loaded, err := m.LoadBackup()
	require.NoError(t, err)
	require.True(t, loaded)
	s := m.Snapshot()
	require.True(t, s.FromBackup)
	require.Equal(t, "m1", s.Master.NodeID)
	require.EqualValues(t, 12, s.Master.Term, "the term is the key's create revision")
	require.Contains(t, s.Brokers, "b1")
	require.Contains(t, s.StorageClusters, "default")
	require.Equal(t, 1, s.Databases.At("db1").NumShards)
	require.Equal(t, []string{"n1"}, s.Assignments.At("db1").Shards[0].Replicas)
	require.Equal(t, "n1", s.ShardStates.At("db1").Shards[0].Leader)
	require.Contains(t, s.Drains, "n9")
	require.Equal(t, "127.0.0.1:9100", s.Nodes.At("default").At("n1").NodeAddress)
	require.Equal(t, "n1", s.ISR.At("default").At("db1/0").Leader)
	require.EqualValues(t, 20, s.ModRev(SourceDatabaseConfig, "db1"))

	m.Start(t.Context())
	m.Stop() // writes the backup again, in the current version
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc struct {
		Version int `json:"version"`
		Sources map[string]struct {
			Kind json.RawMessage `json:"kind"`
		} `json:"sources"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.Equal(t, BackupVersion, doc.Version)
	require.JSONEq(t, `"storage_nodes"`, string(doc.Sources["nodes/default"].Kind))
	require.JSONEq(t, `"database_config"`, string(doc.Sources["databases"].Kind))
	f2, err := ReadBackupFile(path)
	require.NoError(t, err)
	for name, src := range f.Sources {
		require.Equal(t, src.Kind, f2.Sources[name].Kind, name)
		require.Len(t, f2.Sources[name].KVs, len(src.KVs), name)
	}
}

func TestBackupVersionsRefused(t *testing.T) {
	for _, data := range []string{
		`{"format":"cairn-state-backup","version":0,"sources":{}}`,
		`{"format":"cairn-state-backup","version":3,"sources":{}}`,
		`{"format":"other","version":2,"sources":{}}`,
	} {
		_, err := ParseBackup([]byte(data))
		require.ErrorIs(t, err, ErrBackupVersion, data)
	}
	_, err := ParseBackup([]byte(`{"format":"cairn-state-backup","version":2,"sources":{"x":{"kind":"nope"}}}`))
	require.ErrorContains(t, err, "nope")
}
