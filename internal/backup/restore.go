package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// Write batching: etcd refuses a txn over --max-txn-ops (default 128) or a
// request over --max-request-bytes (default 1.5 MiB), so batches stay well
// under both. A single larger value still goes alone.
const (
	maxTxnOps   = 100
	maxTxnBytes = 1 << 20
)

// Restore loads a backup read from r into o.Namespace. It accepts a file
// written by Backup (its checksum is verified first) and a node's local state
// backup (statemachine.BackupFormat). Nothing is written unless the whole input
// is valid and, without force, the namespace is empty; with force the
// namespace's keys are deleted first. Keys are written with Put and no lease,
// values exactly as they were (assignments and shard states keep their terms).
// The restore is not one transaction: if it fails midway, run it again with
// force.
func Restore(ctx context.Context, o Options, r io.Reader, force bool) (Summary, error) {
	if err := o.validate(); err != nil {
		return Summary{}, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return Summary{}, fmt.Errorf("read backup: %w", err)
	}
	kvs, err := decode(data, o)
	if err != nil {
		return Summary{}, err
	}
	if n := markForeignISR(kvs); n > 0 {
		fmt.Fprintf(o.Progress, "restore: %d in-sync records name no etcd cluster (an older backup): marked foreign, so their shards are re-elected from the replicas' logs\n", n)
	}
	prefix := o.Namespace + "/"
	// Leased keys (the master key, live brokers and storage nodes) and
	// failover locks belong to running processes: they neither make the
	// namespace "not empty" nor get deleted by --force, so a restore can run
	// while the nodes of a replaced etcd re-register.
	existing, _, err := o.Store.List(ctx, prefix)
	if err != nil {
		return Summary{}, fmt.Errorf("check %s is empty: %w", prefix, err)
	}
	var stale []string
	for _, e := range existing {
		if e.Lease == 0 && !strings.HasPrefix(e.Key, prefix+"failover/") {
			stale = append(stale, e.Key)
		}
	}
	if len(stale) > 0 {
		if !force {
			return Summary{}, fmt.Errorf("%w: %s holds keys (first: %s); restore only into an empty namespace, or pass --force to delete them first",
				ErrNotEmpty, o.Namespace, stale[0])
		}
		for i := 0; i < len(stale); i += maxTxnOps {
			ops := make([]kv.Op, 0, maxTxnOps)
			for _, k := range stale[i:min(i+maxTxnOps, len(stale))] {
				ops = append(ops, kv.OpDelete(k))
			}
			if _, _, err := o.Store.Txn(ctx, nil, ops); err != nil {
				return Summary{}, fmt.Errorf("clear %s: %w", prefix, err)
			}
		}
		fmt.Fprintf(o.Progress, "restore: deleted %d keys under %s\n", len(stale), prefix)
	}
	rev, err := writeAll(ctx, o, kvs)
	if err != nil {
		return Summary{}, err
	}
	return Summary{Keys: len(kvs), Revision: rev, Bytes: int64(len(data))}, nil
}

// isrKey matches an in-sync record's key: .../isr/<db>/<shard>.
var isrKey = regexp.MustCompile(`/isr/[A-Za-z0-9_-]{1,64}/[0-9]+$`)

// markForeignISR gives every in-sync record without a cluster id
// models.ForeignCluster (its other fields kept as they are) and returns how
// many it marked: a backup of a release whose records named no cluster
// would otherwise skip the stale-set check and leave its shards online at
// their old terms.
func markForeignISR(kvs []kvp) int {
	n := 0
	for i, e := range kvs {
		if !isrKey.MatchString(e.key) {
			continue
		}
		var rec map[string]json.RawMessage
		if json.Unmarshal(e.value, &rec) != nil || rec["replicas"] == nil {
			continue
		}
		var id uint64
		if raw, ok := rec["cluster_id"]; ok && json.Unmarshal(raw, &id) == nil && id != 0 {
			continue
		}
		rec["cluster_id"], _ = json.Marshal(models.ForeignCluster)
		kvs[i].value, _ = json.Marshal(rec)
		n++
	}
	return n
}

// decode turns either backup format into absolute keys under o.Namespace.
func decode(data []byte, o Options) ([]kvp, error) {
	format, err := sniffFormat(data)
	if err != nil {
		return nil, err
	}
	switch format {
	case Format:
		h, kvs, err := decodeFile(data, o.Namespace)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Progress, "restore: backup of %s at revision %d, taken %s: %d keys into %s\n",
			h.Namespace, h.Revision, h.TakenAt, len(kvs), o.Namespace)
		if len(h.ExternalClusters) > 0 {
			fmt.Fprintf(o.Progress, "restore: storage clusters %v keep their keys in their own etcd: they are not in this backup\n",
				h.ExternalClusters)
		}
		return kvs, nil
	case statemachine.BackupFormat:
		return decodeStateBackup(data, o)
	}
	return nil, fmt.Errorf("%w: unknown format %q (want %q or %q)", ErrCorrupt, format, Format, statemachine.BackupFormat)
}

// skippedKinds are live or leased: they belong to running processes, which
// re-create them.
var skippedKinds = map[statemachine.Kind]bool{
	statemachine.KindMaster: true, statemachine.KindBrokers: true, statemachine.KindStorageNodes: true,
}

// decodeStateBackup reads a node's local backup. It has no checksum of its
// own; the JSON parse and the format checks are what guard it.
func decodeStateBackup(data []byte, o Options) ([]kvp, error) {
	pf, err := statemachine.ParseBackup(data)
	if err != nil {
		return nil, fmt.Errorf("%w: state backup: %w", ErrCorrupt, err)
	}
	f := *pf
	external := externalClusters(f)
	names := make([]string, 0, len(f.Sources))
	for name := range f.Sources {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic errors and write order
	prefix := o.Namespace + "/"
	var out []kvp
	seen := map[string]bool{}
	for _, name := range names {
		src := f.Sources[name]
		if skippedKinds[src.Kind] {
			continue
		}
		if src.Cluster != "" && external[src.Cluster] {
			fmt.Fprintf(o.Progress, "restore: source %q belongs to storage cluster %q, which has its own etcd: skipped\n",
				name, src.Cluster)
			continue
		}
		for _, k := range src.KVs {
			if !strings.HasPrefix(k.Key, prefix) || len(k.Key) == len(prefix) {
				return nil, fmt.Errorf("%w: key %q of source %q is not under %s", ErrOutsideNamespace, k.Key, name, o.Namespace)
			}
			if seen[k.Key] {
				continue // two sources watching overlapping prefixes saw the same key
			}
			seen[k.Key] = true
			out = append(out, kvp{key: k.Key, value: []byte(k.Value)})
		}
	}
	return out, nil
}

// externalClusters names the storage clusters configured with their own etcd:
// their cluster-scoped keys came from that etcd, not this one.
func externalClusters(f statemachine.BackupFile) map[string]bool {
	out := map[string]bool{}
	for _, src := range f.Sources {
		if src.Kind != statemachine.KindStorageConfig {
			continue
		}
		for _, k := range src.KVs {
			var sc models.StorageCluster
			if json.Unmarshal(k.Value, &sc) == nil && len(sc.EtcdEndpoints) > 0 {
				out[sc.Name] = true
			}
		}
	}
	return out
}

// writeAll puts kvs in batched transactions and returns the last revision.
func writeAll(ctx context.Context, o Options, kvs []kvp) (int64, error) {
	var rev int64
	ops := make([]kv.Op, 0, maxTxnOps)
	size, done := 0, 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, r, err := o.Store.Txn(ctx, nil, ops)
		if err != nil {
			return fmt.Errorf("restore wrote %d of %d keys, then: %w (run it again with --force)", done, len(kvs), err)
		}
		rev = r
		before := done / progressEvery
		done += len(ops)
		if done/progressEvery > before {
			fmt.Fprintf(o.Progress, "restore: %d of %d keys written\n", done, len(kvs))
		}
		ops, size = ops[:0], 0
		return nil
	}
	for _, k := range kvs {
		n := len(k.key) + len(k.value)
		if len(ops) == maxTxnOps || (len(ops) > 0 && size+n > maxTxnBytes) {
			if err := flush(); err != nil {
				return 0, err
			}
		}
		ops = append(ops, kv.OpPut(k.key, k.value, 0))
		size += n
	}
	if err := flush(); err != nil {
		return 0, err
	}
	if rev == 0 {
		// Nothing written: report where the store stands.
		_, r, err := o.Store.ListAt(ctx, o.Namespace+"/", "", 0, 1)
		if err != nil {
			return 0, fmt.Errorf("read revision: %w", err)
		}
		rev = r
	}
	return rev, nil
}
