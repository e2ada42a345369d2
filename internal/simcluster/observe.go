package simcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/cairn-db/cairn/statemachine"
)

// masterSeesAll waits until the etcd,master,broker process lists every
// agent as a live node of the cluster (GET /api/v1/nodes, polled every
// 200ms): the databases are created only once the master places on all.
func (c *cluster) masterSeesAll(ctx context.Context) error {
	client := &http.Client{Timeout: 10 * time.Second}
	seen := func() int {
		resp, err := client.Get(c.api + "/api/v1/nodes")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var body struct {
			Storage map[string][]json.RawMessage `json:"storage"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
			return -1
		}
		return len(body.Storage["default"])
	}
	deadline := time.Now().Add(5 * time.Minute)
	for n := seen(); n != c.p.Nodes; n = seen() {
		if time.Now().After(deadline) {
			return fmt.Errorf("simulate cluster: the master lists %d of %d agents after 5m", n, c.p.Nodes)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// observe starts a state store of the shard states and in-sync sets of the
// cluster, for the failover's measure, and returns it once both are listed.
func (c *cluster) observe(ctx context.Context) (*statemachine.Manager, error) {
	m := statemachine.New(statemachine.Config{Logger: c.lg})
	m.Start(context.Background())
	var names []string
	srcs := append(statemachine.MainSources(c.store, c.keys), statemachine.ClusterSources(c.store, "default", c.ck)...)
	for _, src := range srcs {
		if src.Kind == statemachine.KindShardState || src.Kind == statemachine.KindISR {
			m.AddSource(src)
			names = append(names, src.Name)
		}
	}
	err := c.until(ctx, time.Minute, "shard states and in-sync sets listed", func() bool {
		st := m.Snapshot()
		for _, n := range names {
			if !st.Synced[n] {
				return false
			}
		}
		return true
	})
	if err != nil {
		m.Stop()
		return nil, err
	}
	return m, nil
}
