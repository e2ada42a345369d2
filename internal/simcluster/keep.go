package simcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cairn-db/cairn/models"
)

// unledFile names, in a kept run directory, the shards not online under a
// live leader when the run ended, with their states and in-sync sets.
const unledFile = "unled.txt"

// dumpUnled writes unledFile into dir: every shard of the master's
// published state that is not online under a node with a live record,
// with the in-sync set etcd holds for it (when etcd answers). It returns
// how many it wrote.
func (c *cluster) dumpUnled(dir string) (int, error) {
	if c.sm == nil || c.store == nil {
		return 0, nil
	}
	st := c.sm.Snapshot()
	live := st.Nodes.At("default")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A loaded etcd may not answer: the shards are listed all the same,
	// from the agents' state store, with their sets unknown.
	isrOf := map[string]string{}
	isrs, _, err := c.store.List(ctx, c.ck.ISRPrefix())
	for _, kv := range isrs {
		isrOf[strings.TrimPrefix(kv.Key, c.ck.ISRPrefix())] = string(kv.Value)
	}
	unknown := ""
	if err != nil {
		unknown = fmt.Sprintf(" (in-sync sets unknown: %v)", err)
	}
	var lines []string
	for db, ss := range st.ShardStates.All() {
		for _, s := range ss.Shards {
			if s.Status == models.StatusOnline && live.Has(s.Leader) {
				continue
			}
			id := fmt.Sprintf("%s/%d", db, s.ID)
			lines = append(lines, fmt.Sprintf("%s leader=%s live=%t term=%d status=%s reason=%q isr=%s",
				id, s.Leader, live.Has(s.Leader), s.Term, s.Status, s.Reason, isrOf[id]))
		}
	}
	sort.Strings(lines)
	body := fmt.Sprintf("%d shards not online under a live leader (%d live nodes)%s\n%s\n", len(lines), live.Len(), unknown, strings.Join(lines, "\n"))
	return len(lines), os.WriteFile(filepath.Join(dir, unledFile), []byte(body), 0o644)
}
