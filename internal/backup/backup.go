package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
)

// Errors a caller (and Main's exit code) tells apart with errors.Is.
var (
	// ErrCorrupt means the input is not a usable backup: bad checksum,
	// truncated, not JSON, or an unknown format or version.
	ErrCorrupt = errors.New("backup file is corrupt or unsupported")
	// ErrNotEmpty means the target namespace already has keys and force was not given.
	ErrNotEmpty = errors.New("namespace is not empty")
	// ErrOutsideNamespace means a node's state backup holds a key that does not
	// lie under the target namespace.
	ErrOutsideNamespace = errors.New("key outside the namespace")
	// ErrBadOptions means Options are unusable (no store, empty namespace).
	ErrBadOptions = errors.New("bad backup options")
)

// progressEvery is how many keys pass between two progress lines, so small
// namespaces stay quiet and large ones show they are moving.
const progressEvery = 10000

// Options say what to back up or restore, and where.
type Options struct {
	Store kv.Store
	// Namespace is e.g. "/cairn". Keys are stored relative to it in the file
	// so a backup can be restored under another namespace.
	Namespace string
	// Progress receives progress lines and warnings; may be nil.
	Progress io.Writer
	// PageSize is how many keys each read (default 1000).
	PageSize int
	// Now is the clock for taken_at (default time.Now).
	Now func() time.Time
}

func (o *Options) validate() error {
	if o.Store == nil {
		return fmt.Errorf("%w: no store", ErrBadOptions)
	}
	o.Namespace = strings.TrimRight(o.Namespace, "/")
	if o.Namespace == "" {
		return fmt.Errorf("%w: empty namespace (the whole keyspace is never backed up or restored)", ErrBadOptions)
	}
	if o.PageSize <= 0 {
		o.PageSize = 1000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Summary says what a backup or restore did. Revision is the revision the
// backup was taken at, or the store's revision after a restore's last write;
// Bytes is the size of the file written or read.
type Summary struct {
	Keys     int
	Revision int64
	Bytes    int64
}

// Backup writes a consistent backup of o.Namespace to w: every key at one
// revision, read in pages, except leased keys (master key, live brokers and
// storage nodes: they belong to running processes) and failover locks (they
// are leases in spirit and meaningless in another cluster).
func Backup(ctx context.Context, o Options, w io.Writer) (Summary, error) {
	if err := o.validate(); err != nil {
		return Summary{}, err
	}
	keys := models.Keys{NS: o.Namespace}
	// Reading the storage configs first fixes the revision and names the
	// clusters whose keys are elsewhere, all before the header is written.
	cfgs, rev, err := o.Store.ListAt(ctx, keys.StorageConfigPrefix(), "", 0, 0)
	if err != nil {
		return Summary{}, fmt.Errorf("read storage clusters: %w", err)
	}
	h := header{Format: Format, Version: Version, Namespace: o.Namespace, Revision: rev,
		TakenAt: o.Now().UTC().Format(time.RFC3339)}
	for _, c := range cfgs {
		h.ExternalClusters = append(h.ExternalClusters, checkCluster(o, keys, c)...)
	}
	fw, err := newFileWriter(w, h)
	if err != nil {
		return Summary{}, fmt.Errorf("write backup: %w", err)
	}
	prefix := o.Namespace + "/"
	failover := prefix + "failover/"
	after := ""
	for {
		page, _, err := o.Store.ListAt(ctx, prefix, after, rev, o.PageSize)
		if err != nil {
			return Summary{}, fmt.Errorf("read %s at revision %d: %w", prefix, rev, err)
		}
		for _, k := range page {
			if k.Lease != 0 || strings.HasPrefix(k.Key, failover) {
				continue
			}
			if err := fw.add(strings.TrimPrefix(k.Key, prefix), k.Value); err != nil {
				return Summary{}, fmt.Errorf("write backup: %w", err)
			}
			if fw.count%progressEvery == 0 {
				fmt.Fprintf(o.Progress, "backup: %d keys written\n", fw.count)
			}
		}
		if len(page) < o.PageSize {
			break
		}
		after = page[len(page)-1].Key
	}
	n, err := fw.finish()
	if err != nil {
		return Summary{}, fmt.Errorf("write backup: %w", err)
	}
	return Summary{Keys: fw.count, Revision: rev, Bytes: n}, nil
}

// checkCluster returns the cluster's name when it lives in its own etcd, and
// warns when its keys sit in this etcd but outside the namespace: neither is
// in the backup.
func checkCluster(o Options, keys models.Keys, c kv.KeyValue) []string {
	name := strings.TrimPrefix(c.Key, keys.StorageConfigPrefix())
	var sc models.StorageCluster
	if err := json.Unmarshal(c.Value, &sc); err != nil {
		fmt.Fprintf(o.Progress, "backup: warning: storage cluster %q has an unreadable config: %v\n", name, err)
		return nil
	}
	if sc.Name == "" {
		sc.Name = name
	}
	if len(sc.EtcdEndpoints) > 0 {
		fmt.Fprintf(o.Progress, "backup: storage cluster %q keeps its keys in its own etcd %v: not in this backup\n",
			name, sc.EtcdEndpoints)
		return []string{name}
	}
	sns := keys.ClusterNamespace(sc)
	if !strings.HasPrefix(sns+"/", o.Namespace+"/") {
		fmt.Fprintf(o.Progress, "backup: warning: storage cluster %q keeps its keys under %s, outside %s: not in this backup\n",
			name, sns, o.Namespace)
	}
	return nil
}
