package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// dataCluster is the data-path topology: a broker (with or without its own
// etcd member), an etcd endpoint, and storage nodes in cluster "default".
type dataCluster struct {
	t       testing.TB
	broker  *Proc   // has the broker and master roles
	etcd    *Proc   // the process holding the etcd member (may be broker)
	storage []*Proc // storage nodes, each with its own data dir
	ids     []string
	db      string
	rf      int
	shards  int
}

// dataClusterOpts chooses the topology.
type dataClusterOpts struct {
	separateEtcd bool // a `--role etcd` process apart from `--role master,broker`
	storageNodes int
	shards       int
	rf           int
	// nodeArgs are extra flags of storage node i (e.g. --node-labels).
	nodeArgs func(i int) []string
	// failureDomain is the storage cluster's failure_domain.
	failureDomain string
	// etcd, when set, starts the separate etcd process instead of
	// startEtcd (separateEtcd is then implied).
	etcd func() etcdMember
}

// startDataCluster starts the processes, creates the storage cluster and
// database "db", and waits until every shard is online with rf in-sync
// replicas.
func startDataCluster(t testing.TB, o dataClusterOpts) *dataCluster {
	t.Helper()
	c := &dataCluster{t: t, db: "db", rf: o.rf, shards: o.shards}
	var endpoint string
	if o.separateEtcd || o.etcd != nil {
		var e etcdMember
		if o.etcd != nil {
			e = o.etcd()
		} else {
			e = startEtcd(t)
		}
		e.waitStatus("/api/v1/health", 200, 15*time.Second)
		c.etcd, endpoint = e.Proc, e.clientURL
		c.broker = startNode(t, "master,broker", endpoint)
	} else {
		endpoint = freeURL(t)
		c.broker = start(t, "--role", "etcd,master,broker", "--data-dir", t.TempDir(), "--http-addr", freeAddr(t),
			"--etcd-listen-client-url", endpoint, "--etcd-listen-peer-url", freeURL(t),
			"--lease-ttl", "2s", "--log-format", "json")
		c.etcd = c.broker
	}
	id := nodeID(t, c.broker)
	masterIs(t, c.broker, id, 15*time.Second)
	require.Eventually(t, func() bool {
		code, _ := c.broker.post("/api/v1/storage-clusters", map[string]any{"name": "default", "failure_domain": o.failureDomain})
		return code == 201 || code == 409
	}, 10*time.Second, 50*time.Millisecond, "storage cluster never created")
	for i := range o.storageNodes {
		var extra []string
		if o.nodeArgs != nil {
			extra = o.nodeArgs(i)
		}
		s := startNode(t, "storage", endpoint, extra...)
		c.storage = append(c.storage, s)
	}
	for _, s := range c.storage {
		c.ids = append(c.ids, nodeID(t, s))
	}
	require.Eventually(t, func() bool {
		var nodes struct {
			Storage map[string][]struct {
				NodeID string `json:"node_id"`
			} `json:"storage"`
		}
		if getDataJSON(c.broker, "/api/v1/nodes", &nodes) != 200 {
			return false
		}
		return len(nodes.Storage["default"]) == o.storageNodes
	}, 15*time.Second, 20*time.Millisecond, "storage nodes never all live")
	code, body := c.broker.post("/api/v1/databases", map[string]any{
		"name": c.db, "num_shards": o.shards, "replica_factor": o.rf,
	})
	require.Equal(t, 201, code, "create database: %v", body)
	c.waitHealthy(30 * time.Second)
	return c
}

// dataShard is one entry of GET /databases/{name}/shards.
type dataShard struct {
	ID       int      `json:"id"`
	Replicas []string `json:"replicas"`
	Leader   string   `json:"leader"`
	Term     int64    `json:"term"`
	ISR      []string `json:"isr"`
	Status   string   `json:"status"`
}

// shardsOf reads the broker's view of the shards; nil when it does not answer.
func (c *dataCluster) shardsOf() []dataShard {
	var out struct {
		Shards []dataShard `json:"shards"`
	}
	if getDataJSON(c.broker, "/api/v1/databases/"+c.db+"/shards", &out) != 200 {
		return nil
	}
	return out.Shards
}

// healthy reports whether every shard is online and has every replica in
// its in-sync set.
func (c *dataCluster) healthy() bool {
	shards := c.shardsOf()
	if len(shards) != c.shards {
		return false
	}
	for _, s := range shards {
		if s.Status != "online" || s.Leader == "" || len(s.Replicas) != c.rf || len(s.ISR) != c.rf {
			return false
		}
		for _, r := range s.Replicas {
			if !slices.Contains(s.ISR, r) {
				return false
			}
		}
	}
	// A new database's first in-sync sets are recorded with its placement,
	// before the nodes open their replicas: healthy also needs every replica
	// served (asked of the nodes).
	var prog struct {
		Shards []struct {
			Replicas   []string       `json:"replicas"`
			Progress   map[string]any `json:"progress"`
			Unanswered []string       `json:"unanswered"`
		} `json:"shards"`
	}
	if getDataJSON(c.broker, "/api/v1/databases/"+c.db+"/shards?progress=true", &prog) != 200 || len(prog.Shards) != c.shards {
		return false
	}
	for _, s := range prog.Shards {
		if len(s.Unanswered) > 0 || len(s.Progress) != len(s.Replicas) {
			return false
		}
	}
	return true
}

func (c *dataCluster) waitHealthy(within time.Duration) {
	c.t.Helper()
	require.Eventually(c.t, c.healthy, within, 20*time.Millisecond,
		"shards never all online with %d in-sync replicas: %+v", c.rf, c.shardsOf())
}

// leaderCounts is how many shards each storage node leads.
func (c *dataCluster) leaderCounts() map[string]int {
	out := map[string]int{}
	for _, s := range c.shardsOf() {
		out[s.Leader]++
	}
	return out
}

// waitLeft waits until node leads no shard and is in no in-sync set, with
// every shard online.
func (c *dataCluster) waitLeft(node string, within time.Duration) {
	c.t.Helper()
	require.Eventually(c.t, func() bool {
		shards := c.shardsOf()
		if len(shards) != c.shards {
			return false
		}
		for _, s := range shards {
			if s.Status != "online" || s.Leader == node || slices.Contains(s.ISR, node) {
				return false
			}
		}
		return true
	}, within, 20*time.Millisecond, "%s never left every shard: %+v", node, c.shardsOf())
}

// moveLeadersOff transfers every leadership of node to another in-sync
// replica, so node is a pure follower.
func (c *dataCluster) moveLeadersOff(node string) {
	c.t.Helper()
	for _, s := range c.shardsOf() {
		if s.Leader != node {
			continue
		}
		to := ""
		for _, r := range s.ISR {
			if r != node {
				to = r
				break
			}
		}
		require.NotEmpty(c.t, to, "shard %d has no other in-sync replica", s.ID)
		code, body := c.broker.post(fmt.Sprintf("/api/v1/databases/%s/shards/%d/leader", c.db, s.ID), map[string]any{"node_id": to})
		require.Equal(c.t, 202, code, "transfer shard %d to %s: %v", s.ID, to, body)
	}
	require.Eventually(c.t, func() bool {
		return c.leaderCounts()[node] == 0 && c.healthy()
	}, 15*time.Second, 20*time.Millisecond, "%s still leads shards: %+v", node, c.shardsOf())
}

// proc is the storage process with node id id.
func (c *dataCluster) proc(id string) *Proc {
	i := slices.Index(c.ids, id)
	require.GreaterOrEqual(c.t, i, 0, "unknown node %s", id)
	return c.storage[i]
}

// busiestLeader is the storage node leading the most shards, and those shards.
func (c *dataCluster) busiestLeader() (string, []int) {
	c.t.Helper()
	shards := c.shardsOf()
	require.Len(c.t, shards, c.shards)
	counts := map[string][]int{}
	best := ""
	for _, s := range shards {
		counts[s.Leader] = append(counts[s.Leader], s.ID)
		if best == "" || len(counts[s.Leader]) > len(counts[best]) {
			best = s.Leader
		}
	}
	require.NotEmpty(c.t, best)
	return best, counts[best]
}

// getDataJSON decodes GET path's body into out and returns the status (0: no answer).
func getDataJSON(p *Proc, path string, out any) int {
	resp, err := p.client.Get("http://" + p.addr + path)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	// Timestamps are unix nanoseconds: float64 would round them.
	dec.UseNumber()
	if resp.StatusCode == 200 && dec.Decode(out) != nil {
		return -1
	}
	return resp.StatusCode
}

// postData sends a raw body and returns the status and the error body.
func postData(client *http.Client, url string, body []byte) (int, string, error) {
	resp, err := client.Post(url, "text/plain; charset=utf-8", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, strings.TrimSpace(string(msg)), nil
}

// dataQueryResult is GET /query's answer with exact integer timestamps.
type dataQueryResult struct {
	Series []struct {
		Metric string            `json:"metric"`
		Tags   map[string]string `json:"tags"`
		Points [][2]json.Number  `json:"points"`
	} `json:"series"`
}

// queryAll reads every point of metric over the whole time range, retrying
// while the broker answers anything but 200 (a shard between leaders).
func (c *dataCluster) queryAll(metric string, within time.Duration) dataQueryResult {
	c.t.Helper()
	var out dataQueryResult
	var code int
	require.Eventually(c.t, func() bool {
		out = dataQueryResult{}
		code = getDataJSON(c.broker, fmt.Sprintf("/api/v1/query?db=%s&metric=%s&start=0&end=%d", c.db, metric, int64(1)<<62), &out)
		return code == 200
	}, within, 50*time.Millisecond, "query never answered 200 (last %d)", code)
	return out
}
