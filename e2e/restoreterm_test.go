package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// maxLogTerms reads every live storage node's max_term (the term of the last
// entry in its log of each shard) through the broker.
func (c *dataCluster) maxLogTerms() map[string]int64 {
	var nodes struct {
		Storage map[string][]struct {
			NodeID  string           `json:"node_id"`
			MaxTerm map[string]int64 `json:"max_term"`
		} `json:"storage"`
	}
	out := map[string]int64{}
	if getDataJSON(c.broker, "/api/v1/nodes", &nodes) != 200 {
		return nil
	}
	for _, n := range nodes.Storage["default"] {
		for shard, t := range n.MaxTerm {
			out[shard] = max(out[shard], t)
		}
	}
	return out
}

// TestRestoreNeverRollsTermsBack: a backup taken at term 1, a failover to
// term 2 with writes at term 2, then etcd lost and the older backup restored.
// The restored state names term 1 leaders whose replicas hold term-2 entries;
// the master must publish every shard above the terms in its replicas' logs,
// so writes resume within seconds and no acknowledged point is lost.
func TestRestoreNeverRollsTermsBack(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{separateEtcd: true, storageNodes: 2, shards: 2, rf: 2})
	client := c.etcd.argOf("--etcd-listen-client-url")

	w1 := startDataWriterAt(t, c, 0, 10)
	w1.waitAcked(10, 20*time.Second)
	before := c.shardsOf()
	file := filepath.Join(t.TempDir(), "cairn.backup")
	code, _, stderr := runCLI(t, "backup", "--out", file, "--etcd-endpoints", client)
	require.Equal(t, 0, code, "backup: %s", stderr)

	// Fail the busiest leader's shards over to term 2, bring the node back as
	// a follower and write at term 2 on both replicas.
	victim, led := c.busiestLeader()
	p := c.proc(victim)
	p.term()
	c.waitLeft(victim, 15*time.Second)
	p.restart()
	c.waitHealthy(30 * time.Second)
	w2 := startDataWriterAt(t, c, 1_000_000, 10)
	w2.waitAcked(10, 20*time.Second)
	var logTerms map[string]int64
	require.Eventually(t, func() bool {
		logTerms = c.maxLogTerms()
		for _, id := range led {
			if logTerms[fmt.Sprintf("%s/%d", c.db, id)] < 2 {
				return false
			}
		}
		return true
	}, 15*time.Second, 50*time.Millisecond, "replicas never reported term-2 entries: %v", logTerms)
	c.waitHealthy(30 * time.Second)

	thawed := c.loseEtcdAndRestore(t, file)

	// The nodes adopt the restored state (the master of the new etcd's
	// election), and the master publishes the failed-over shards above the
	// terms their replicas' logs hold.
	c.waitRestoredMaster(client)
	var shards []dataShard
	require.Eventually(t, func() bool {
		shards = c.shardsOf()
		if len(shards) != c.shards {
			return false
		}
		for _, s := range shards {
			if s.Status != "online" || (slices.Contains(led, s.ID) && s.Term <= logTerms[fmt.Sprintf("%s/%d", c.db, s.ID)]) {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "shards never published above the terms in their replicas' logs %v (backup had %+v)", logTerms, before)
	// Writes touching every shard are acknowledged again within seconds.
	w3 := startDataWriterAt(t, c, 2_000_000, 0)
	w3.waitAcked(5, 15*time.Second)
	w3.stop()
	acked, _ := w3.snapshot()
	t.Logf("restore done and nodes resumed to first write acknowledged on every shard: %s; shards now %+v",
		acked[0].end.Sub(thawed).Round(time.Millisecond), shards)
	require.Len(t, shards, c.shards)
	for _, w := range []*dataWriter{w1, w2, w3} {
		c.verifyAcked(w)
	}
}

// loseEtcdAndRestore: etcd is lost and replaced by a fresh one at the same
// URLs, into which the backup file is restored; the broker and the storage
// nodes are frozen meanwhile (restore wants an empty namespace) as in
// TestBackupRestoreRoundTrip. It returns when they run again.
func (c *dataCluster) loseEtcdAndRestore(t *testing.T, file string) time.Time {
	t.Helper()
	client, peer := c.etcd.argOf("--etcd-listen-client-url"), c.etcd.argOf("--etcd-listen-peer-url")
	require.NotEmpty(t, peer)
	nodes := append([]*Proc{c.broker}, c.storage...)
	frozen := false
	thaw := func() {
		if frozen {
			frozen = false
			for _, n := range nodes {
				n.cont()
			}
		}
	}
	t.Cleanup(thaw)
	for _, n := range nodes {
		n.stop()
	}
	frozen = true
	c.etcd.kill9()
	require.NoError(t, os.RemoveAll(c.etcd.dataDirArg()))
	e2 := startEtcdOn(t, client, peer)
	e2.waitStatus("/api/v1/health", 200, 15*time.Second)
	require.Eventually(t, func() bool {
		code, r := e2.get("/api/v1/ready")
		return code == 200 && r["etcd"] == "up"
	}, 15*time.Second, 50*time.Millisecond, "fresh etcd never came up")
	code, _, stderr := runCLI(t, "restore", "--in", file, "--etcd-endpoints", client)
	require.Equal(t, 0, code, "restore: %s", stderr)
	thaw()
	return time.Now()
}

// waitRestoredMaster waits until a master is elected in the restored etcd
// and the broker follows it.
func (c *dataCluster) waitRestoredMaster(client string) {
	t := c.t
	t.Helper()
	require.Eventually(t, func() bool {
		_, ok := etcdSnapshot(t, client, "/cairn/master/")["/cairn/master/node"]
		return ok
	}, 30*time.Second, 50*time.Millisecond, "no master elected in the restored etcd")
	_, newTerm := etcdMaster(t, client)
	require.Eventually(t, func() bool {
		code, m := c.broker.get("/api/v1/master")
		return code == 200 && m["term"] == float64(newTerm)
	}, 30*time.Second, 50*time.Millisecond, "the broker never adopted the restored etcd")
}

// seenTerms reads every live storage node's seen_term (the highest term each
// replica accepted) through the broker: per shard, the lowest over the
// nodes that report it, so every replica has accepted at least that.
func (c *dataCluster) seenTerms() map[string]int64 {
	var nodes struct {
		Storage map[string][]struct {
			NodeID   string           `json:"node_id"`
			SeenTerm map[string]int64 `json:"seen_term"`
		} `json:"storage"`
	}
	out := map[string]int64{}
	if getDataJSON(c.broker, "/api/v1/nodes", &nodes) != 200 {
		return nil
	}
	for _, n := range nodes.Storage["default"] {
		for shard, t := range n.SeenTerm {
			if cur, ok := out[shard]; !ok || t < cur {
				out[shard] = t
			}
		}
	}
	return out
}

// TestRestoreAfterEmptyLeadershipNeverReusesTerms: a backup at term 1, then
// every shard's leadership moves to its other replica (term 2) and nothing is
// written at term 2: no log holds a term-2 entry, only the replicas' seen
// terms. etcd is lost and the term-1 backup restored. The master must
// publish every shard above term 2 (never hand term 2 out again, possibly to
// another leader), the etcd history must show one leader per shard term,
// and writes resume with nothing acknowledged lost.
func TestRestoreAfterEmptyLeadershipNeverReusesTerms(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{separateEtcd: true, storageNodes: 2, shards: 2, rf: 2})
	client := c.etcd.argOf("--etcd-listen-client-url")
	hist := startLeaderHistory(client, "/cairn/state/shards/")
	defer hist.stop()

	w1 := startDataWriterAt(t, c, 0, 10)
	w1.waitAcked(10, 20*time.Second)
	w1.stop()
	file := filepath.Join(t.TempDir(), "cairn.backup")
	code, _, stderr := runCLI(t, "backup", "--out", file, "--etcd-endpoints", client)
	require.Equal(t, 0, code, "backup: %s", stderr)

	// Graceful transfers: term 2 on every shard, no write at it.
	for _, s := range c.shardsOf() {
		require.Equal(t, int64(1), s.Term)
		to := s.Replicas[0]
		if to == s.Leader {
			to = s.Replicas[1]
		}
		code, body := c.broker.post(fmt.Sprintf("/api/v1/databases/%s/shards/%d/leader", c.db, s.ID), map[string]any{"node_id": to})
		require.Equal(t, 202, code, "transfer shard %d to %s: %v", s.ID, to, body)
	}
	require.Eventually(t, func() bool {
		seen, logs := c.seenTerms(), c.maxLogTerms()
		for id := range c.shards {
			k := fmt.Sprintf("%s/%d", c.db, id)
			if seen[k] != 2 || logs[k] != 1 {
				return false
			}
		}
		return c.healthy()
	}, 20*time.Second, 50*time.Millisecond, "replicas never reported seen term 2 with logs at term 1: seen %v, logs %v", c.seenTerms(), c.maxLogTerms())

	c.loseEtcdAndRestore(t, file)
	c.waitRestoredMaster(client)
	var shards []dataShard
	require.Eventually(t, func() bool {
		shards = c.shardsOf()
		if len(shards) != c.shards {
			return false
		}
		for _, s := range shards {
			if s.Status != "online" || s.Term <= 2 {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "shards never published above term 2 (already handed out) after the restore: %+v", c.shardsOf())
	w2 := startDataWriterAt(t, c, 1_000_000, 0)
	w2.waitAcked(5, 15*time.Second)
	w2.stop()
	values, terms, gaps, errs := hist.summary()
	require.Empty(t, gaps)
	require.Empty(t, errs)
	require.Positive(t, values)
	require.Empty(t, hist.doubleLeaders(), "one leader per shard term (%d terms read)", terms)
	for _, w := range []*dataWriter{w1, w2} {
		c.verifyAcked(w)
	}
}
