package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/stretchr/testify/require"
)

// seed writes a realistic namespace (about 50 keys) and returns the keys a
// backup must hold, relative to ns. Leased keys, failover locks and keys of
// other namespaces are written too, and must not be in it.
func seed(t *testing.T, s kv.Store, ns string) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	want := map[string][]byte{}
	put := func(rel string, v string) {
		_, err := s.Put(ctx, ns+"/"+rel, []byte(v), 0)
		require.NoError(t, err)
		want[rel] = []byte(v)
	}
	put("storage/config/default", `{"name":"default","etcd_endpoints":[],"namespace":""}`)
	put("storage/config/east", `{"name":"east","etcd_endpoints":["http://10.0.0.9:2379"],"namespace":"/east"}`)
	for i := range 12 {
		db := fmt.Sprintf("db%02d", i)
		put("database/config/"+db, fmt.Sprintf(`{"name":%q,"storage_cluster":"default","num_shards":2,"replica_factor":2,"options":{"ttl":"7d"}}`, db))
		put("database/assign/"+db, fmt.Sprintf(`{"db":%q,"cluster":"default","shards":[{"id":0,"replicas":["n1","n2"]},{"id":1,"replicas":["n2","n3"]}]}`, db))
		put("state/shards/"+db, fmt.Sprintf(`{"db":%q,"shards":[{"id":0,"leader":"n1","term":%d,"status":"online"},{"id":1,"leader":"n2","term":7,"status":"online"}]}`, db, 3+i))
	}
	for i := range 5 {
		put(fmt.Sprintf("storage/default/isr/db00/%d", i), `{"leader":"n1","term":4,"replicas":["n1","n2"],"cluster_id":7}`)
	}
	put("drain/n3", `{"node_id":"n3","since":1700000000000}`)
	put("misc/raw", "\x00\x01\x02not json")
	put("misc/empty", "")
	put("misc/spaced", ` {"a":1} `)
	put("misc/null", `null`)

	lease, err := s.Grant(ctx, time.Minute)
	require.NoError(t, err)
	for _, k := range []string{"master/node", "live/brokers/b1", "storage/default/live/nodes/n1", "failover/db00/1"} {
		_, err := s.Put(ctx, ns+"/"+k, []byte(`{"node_id":"x"}`), lease)
		require.NoError(t, err)
	}
	// A failover lock is left out even when (wrongly) not leased.
	_, err = s.Put(ctx, ns+"/failover/db01/0", []byte(`"unique"`), 0)
	require.NoError(t, err)
	// Neighbours of the namespace that share its string prefix.
	_, err = s.Put(ctx, ns+"2/database/config/x", []byte(`{}`), 0)
	require.NoError(t, err)
	_, err = s.Put(ctx, ns+"x", []byte(`{}`), 0)
	require.NoError(t, err)
	return want
}

// dump returns every key under ns (relative) and checks none is leased.
func dump(t *testing.T, s kv.Store, ns string) map[string][]byte {
	t.Helper()
	kvs, _, err := s.List(context.Background(), ns+"/")
	require.NoError(t, err)
	out := map[string][]byte{}
	for _, k := range kvs {
		require.Zero(t, k.Lease, "restored key %s is leased", k.Key)
		v := k.Value
		if v == nil {
			v = []byte{}
		}
		out[k.Key[len(ns)+1:]] = v
	}
	return out
}

// requireSame compares two key sets, treating nil and empty values alike.
func requireSame(t *testing.T, want, got map[string][]byte) {
	t.Helper()
	require.Len(t, got, len(want))
	for k, v := range want {
		g, ok := got[k]
		require.True(t, ok, "key %s missing", k)
		require.Equal(t, string(v), string(g), "value of %s", k)
	}
}

// resign recomputes the checksum of a hand-edited backup, to test the checks
// that stand behind it.
func resign(t *testing.T, data []byte) []byte {
	t.Helper()
	i := bytes.LastIndex(data, []byte(checksumField))
	require.Positive(t, i)
	sum := sha256.Sum256(data[:i])
	out := append([]byte{}, data[:i]...)
	return append(out, []byte(checksumField+hex.EncodeToString(sum[:])+"\"}\n")...)
}

func backupBytes(t *testing.T, o Options) []byte {
	t.Helper()
	var buf bytes.Buffer
	s, err := Backup(context.Background(), o, &buf)
	require.NoError(t, err)
	require.Equal(t, int64(buf.Len()), s.Bytes)
	return buf.Bytes()
}

func errorsIsAny(err error, targets ...error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}
