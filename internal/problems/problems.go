// Package problems turns a node's state snapshot into the list of things an
// operator should look at: offline and under-replicated shards, storage
// nodes down, lagging followers, unbalanced leaders, no master, etcd down or
// alarmed, disks nearly full. It is a pure function of the snapshot and the
// time, so the console, alerts and tests all see the same answer.
package problems

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// Severity of a problem, most urgent first.
const (
	Critical = "critical" // data unavailable or about to be: act now
	Warning  = "warning"  // redundancy or balance lost: act soon
	Info     = "info"     // worth knowing, nothing to do
)

// Kinds of problems.
const (
	KindMasterMissing   = "master_missing"
	KindEtcdDown        = "etcd_down"
	KindEtcdAlarm       = "etcd_alarm"
	KindClusterEtcdDown = "cluster_etcd_down"
	KindNodeDown        = "node_down"
	KindShardsOffline   = "shards_offline"
	KindUnderReplicated = "under_replicated"
	KindFollowersLag    = "followers_lagging"
	KindLeaderImbalance = "leader_imbalance"
	KindDiskFull        = "disk_full"  // nearly full, or full: the node refuses writes
	KindDiskError       = "disk_error" // the node refuses writes: its disk failed a write
	KindFlushFailing    = "flush_failing"
	KindDomainUnmet     = "domain_constraint_unmet"
	KindDiskPressure    = "retention_disk_pressure" // the node deleted old blocks to stay under --retention-max-disk-pct
)

// Problem is one thing to look at. Link is the console route where it can be
// fixed ("#overview", "#shards/<db>").
type Problem struct {
	Severity string `json:"severity"`
	Kind     string `json:"kind"`
	Message  string `json:"message"`
	Link     string `json:"link"`
	Cluster  string `json:"cluster,omitempty"`
	DB       string `json:"db,omitempty"`
	Node     string `json:"node,omitempty"`
	// Count is how many shards or replicas the problem covers.
	Count int `json:"count,omitempty"`
	// Since is when it started (unix milliseconds), when known.
	Since int64 `json:"since,omitempty"`
}

// Input is everything Compute reads.
type Input struct {
	State *statemachine.State
	Now   time.Time
	// EtcdUp is whether this node's etcd answered recently.
	EtcdUp bool
	// EtcdAlarms are the alarms etcd raised (e.g. "NOSPACE"), if known.
	EtcdAlarms []string
	// ClustersEtcdDown are the storage clusters on an etcd of their own
	// that did not answer this node's last probe.
	ClustersEtcdDown []ClusterEtcd
	// DiskWarnPct and DiskCriticalPct are the used-space thresholds of a
	// storage node's data disk; defaults 90 and 97.
	DiskWarnPct, DiskCriticalPct int
	// ForgetAfter is how long a departed node that holds no replica is
	// still reported; default one hour.
	ForgetAfter time.Duration
}

// ClusterEtcd is a storage cluster's own etcd as this node last probed it.
type ClusterEtcd struct {
	Cluster   string    `json:"cluster"`
	Endpoints []string  `json:"etcd_endpoints"`
	Since     time.Time `json:"since"` // when it stopped answering
	Err       string    `json:"error,omitempty"`
}

// DownNode is a storage node that holds replicas or left recently but has no
// live record.
type DownNode struct {
	NodeID  string `json:"node_id"`
	Cluster string `json:"cluster"`
	// Since is when this node saw its record vanish (unix ms); 0 when it
	// left before this node started.
	Since int64 `json:"since"`
	// Address is from its last record, when known.
	Address string `json:"node_address,omitempty"`
	// Replicas counts the replicas still assigned to it; Shards lists up to
	// MaxListed of them ("db/shard"), its last known shards.
	Replicas int      `json:"replicas"`
	Shards   []string `json:"shards"`
	Draining bool     `json:"draining"`
}

// MaxListed bounds the shard ids listed per down node.
const MaxListed = 32

// DownNodes lists the storage nodes that are not live but either hold
// assigned replicas or left less than forgetAfter ago, per cluster, sorted.
func DownNodes(st *statemachine.State, now time.Time, forgetAfter time.Duration) []DownNode {
	type key struct{ cluster, id string }
	found := map[key]*DownNode{}
	get := func(cluster, id string) *DownNode {
		k := key{cluster, id}
		if d, ok := found[k]; ok {
			return d
		}
		d := &DownNode{NodeID: id, Cluster: cluster, Shards: []string{}}
		if dep, ok := st.Departed[cluster][id]; ok {
			d.Since, d.Address = dep.Since, dep.Record.NodeAddress
		}
		_, d.Draining = st.Drains[id]
		found[k] = d
		return d
	}
	for _, db := range st.Assignments.Keys() {
		a := st.Assignments.At(db)
		for _, sh := range a.Shards {
			for _, r := range sh.Replicas {
				if _, live := st.Nodes.At(a.Cluster).Get(r); live {
					continue
				}
				d := get(a.Cluster, r)
				d.Replicas++
				if len(d.Shards) < MaxListed {
					d.Shards = append(d.Shards, models.ShardID(db, sh.ID))
				}
			}
		}
	}
	for cluster, gone := range st.Departed {
		for id, dep := range gone {
			if _, live := st.Nodes.At(cluster).Get(id); live {
				continue
			}
			if _, held := found[key{cluster, id}]; held || now.Sub(time.UnixMilli(dep.Since)) < forgetAfter {
				get(cluster, id)
			}
		}
	}
	out := make([]DownNode, 0, len(found))
	for _, d := range found {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b DownNode) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.NodeID, b.NodeID))
	})
	return out
}

// Compute lists the problems of the cluster as st shows it, most severe
// first.
func Compute(in Input) []Problem {
	if in.DiskWarnPct == 0 {
		in.DiskWarnPct = 90
	}
	if in.DiskCriticalPct == 0 {
		in.DiskCriticalPct = 97
	}
	if in.ForgetAfter == 0 {
		in.ForgetAfter = time.Hour
	}
	st := in.State
	var out []Problem
	if !in.EtcdUp {
		out = append(out, Problem{Severity: Critical, Kind: KindEtcdDown, Link: "#overview",
			Message: "etcd is unreachable: the cluster runs on its last known state; failover and metadata changes wait for it"})
	}
	for _, c := range in.ClustersEtcdDown {
		out = append(out, Problem{Severity: Critical, Kind: KindClusterEtcdDown, Link: "#overview", Cluster: c.Cluster,
			Since: c.Since.UnixMilli(),
			Message: fmt.Sprintf("storage cluster %s's etcd (%s) does not answer (%s): its writes go on from the last known state, "+
				"but its node liveness and in-sync sets are not seen, so failover in this cluster is impossible until it answers",
				c.Cluster, strings.Join(c.Endpoints, ","), c.Err)})
	}
	for _, a := range in.EtcdAlarms {
		out = append(out, Problem{Severity: Critical, Kind: KindEtcdAlarm, Link: "#overview",
			Message: fmt.Sprintf("etcd alarm %s raised: etcd refuses writes until it is resolved and disarmed", a)})
	}
	// Before the first list the snapshot is empty, not masterless.
	if st.Master == nil && (st.Synced[statemachine.SourceMaster] || st.FromBackup) {
		out = append(out, Problem{Severity: Critical, Kind: KindMasterMissing, Link: "#overview",
			Message: "no master elected: shard failover and rebalancing are paused until a master candidate wins"})
	}
	out = append(out, nodeProblems(in, st)...)
	for _, name := range st.Databases.Keys() {
		out = append(out, shardProblems(st, st.Databases.At(name))...)
		out = append(out, domainProblems(st, st.Databases.At(name))...)
	}
	out = append(out, leaderProblems(st)...)
	slices.SortStableFunc(out, func(a, b Problem) int { return rank(a.Severity) - rank(b.Severity) })
	return out
}

func rank(sev string) int {
	switch sev {
	case Critical:
		return 0
	case Warning:
		return 1
	}
	return 2
}

func nodeProblems(in Input, st *statemachine.State) []Problem {
	var out []Problem
	for _, d := range DownNodes(st, in.Now, in.ForgetAfter) {
		p := Problem{Severity: Warning, Kind: KindNodeDown, Link: "#overview", Cluster: d.Cluster, Node: d.NodeID,
			Count: d.Replicas, Since: d.Since}
		since := "down"
		if d.Since > 0 {
			since = "down since " + time.UnixMilli(d.Since).UTC().Format(time.RFC3339)
		}
		switch {
		case d.Replicas > 0:
			p.Severity = Critical
			p.Message = fmt.Sprintf("storage node %s (cluster %s) is %s and still holds %d replica(s): restart it, or rebalance to re-create them on live nodes",
				d.NodeID, d.Cluster, since, d.Replicas)
		case d.Draining:
			p.Severity = Info
			p.Message = fmt.Sprintf("drained storage node %s (cluster %s) is %s; it holds no replica", d.NodeID, d.Cluster, since)
		default:
			p.Message = fmt.Sprintf("storage node %s (cluster %s) is %s; it holds no replica", d.NodeID, d.Cluster, since)
		}
		out = append(out, p)
	}
	for _, cluster := range st.Nodes.Keys() {
		nodes := st.Nodes.At(cluster)
		for _, id := range nodes.Keys() {
			pct := nodes.At(id).DiskUsedPct
			if pct < in.DiskWarnPct {
				continue
			}
			sev := Warning
			if pct >= in.DiskCriticalPct {
				sev = Critical
			}
			out = append(out, Problem{Severity: sev, Kind: KindDiskFull, Link: "#overview", Cluster: cluster, Node: id,
				Message: fmt.Sprintf("storage node %s: data disk %d%% full: free space, or drain the node", id, pct)})
		}
		for _, id := range nodes.Keys() {
			out = append(out, flushProblems(cluster, id, nodes.At(id).FlushFailing)...)
			if f := nodes.At(id).DiskFault; f != nil {
				out = append(out, faultProblem(cluster, id, *f))
			}
			if p := nodes.At(id).DiskPressure; p != nil {
				out = append(out, pressureProblem(cluster, id, *p))
			}
		}
	}
	return out
}

// shardProblems reports one database's offline shards, shards with fewer
// live in-sync replicas than its replica factor, and replicas on live nodes
// that are not in sync.
func shardProblems(st *statemachine.State, db models.Database) []Problem {
	a, ok := st.Assignments.Get(db.Name)
	if !ok {
		return nil
	}
	live := st.Nodes.At(a.Cluster)
	isrs := st.ISR.At(a.Cluster)
	var offline, under, lagging int
	var offlineIDs []string
	for _, sh := range a.Shards {
		s, has := st.ShardState(db.Name, sh.ID)
		if !has || s.Status != models.StatusOnline {
			offline++
			if len(offlineIDs) < 8 {
				offlineIDs = append(offlineIDs, fmt.Sprint(sh.ID))
			}
			continue
		}
		// The in-sync set of an older term is not trusted; the leader alone
		// is in sync until it publishes its own.
		inSync := []string{s.Leader}
		if set, ok := isrs.Get(models.ShardID(db.Name, sh.ID)); ok && set.Term == s.Term {
			inSync = set.Replicas
		}
		good := 0
		for _, r := range sh.Replicas {
			_, up := live.Get(r)
			switch {
			case up && slices.Contains(inSync, r):
				good++
			case up:
				lagging++
			}
		}
		if good < db.ReplicaFactor {
			under++
		}
	}
	link := "#shards/" + db.Name
	var out []Problem
	if offline > 0 {
		ids := strings.Join(offlineIDs, ", ")
		if offline > len(offlineIDs) {
			ids += ", ..."
		}
		out = append(out, Problem{Severity: Critical, Kind: KindShardsOffline, Link: link, DB: db.Name, Cluster: a.Cluster, Count: offline,
			Message: fmt.Sprintf("database %s: %d of %d shards offline (%s): writes and queries to them fail until a replica returns",
				db.Name, offline, len(a.Shards), ids)})
	}
	if under > 0 {
		out = append(out, Problem{Severity: Warning, Kind: KindUnderReplicated, Link: link, DB: db.Name, Cluster: a.Cluster, Count: under,
			Message: fmt.Sprintf("database %s: %d of %d online shards have fewer than %d live in-sync replicas",
				db.Name, under, len(a.Shards), db.ReplicaFactor)})
	}
	if lagging > 0 {
		out = append(out, Problem{Severity: Warning, Kind: KindFollowersLag, Link: link, DB: db.Name, Cluster: a.Cluster, Count: lagging,
			Message: fmt.Sprintf("database %s: %d replica(s) on live nodes are catching up (not in sync)", db.Name, lagging)})
	}
	return out
}

// leaderProblems reports clusters whose live, non-draining nodes lead
// unequal numbers of online shards (by more than one).
func leaderProblems(st *statemachine.State) []Problem {
	var out []Problem
	for _, cluster := range slices.Sorted(maps.Keys(st.StorageClusters)) {
		leads := map[string]int{}
		for id := range st.Nodes.At(cluster).All() {
			if _, d := st.Drains[id]; !d {
				leads[id] = 0
			}
		}
		if len(leads) < 2 {
			continue
		}
		shards := 0
		for name, a := range st.Assignments.All() {
			if a.Cluster != cluster {
				continue
			}
			for _, s := range st.ShardStates.At(name).Shards {
				if _, ok := leads[s.Leader]; ok && s.Status == models.StatusOnline {
					leads[s.Leader]++
					shards++
				}
			}
		}
		if shards == 0 {
			continue
		}
		ids := slices.Sorted(maps.Keys(leads))
		most, least := ids[0], ids[0]
		for _, id := range ids {
			if leads[id] > leads[most] {
				most = id
			}
			if leads[id] < leads[least] {
				least = id
			}
		}
		if leads[most]-leads[least] <= 1 {
			continue
		}
		out = append(out, Problem{Severity: Warning, Kind: KindLeaderImbalance, Link: "#overview", Cluster: cluster,
			Count: leads[most] - leads[least],
			Message: fmt.Sprintf("cluster %s: shard leaders unbalanced (%s leads %d, %s leads %d): rebalance to spread the load",
				cluster, most, leads[most], least, leads[least])})
	}
	return out
}

// flushProblems reports the replicas of a storage node whose flushes fail:
// their points pile up in memory and writes to them stop once it is full.
func flushProblems(cluster, node string, failing map[string]string) []Problem {
	out := make([]Problem, 0, len(failing))
	for _, shard := range slices.Sorted(maps.Keys(failing)) {
		out = append(out, Problem{Severity: Critical, Kind: KindFlushFailing, Link: "#overview", Cluster: cluster, Node: node,
			Message: fmt.Sprintf("storage node %s: shard %s cannot flush (%s): writes to it fail once its memtable is full; see the node's log",
				node, shard, failing[shard])})
	}
	return out
}

// faultProblem reports a storage node that fenced itself off writes: its
// write-ahead log failed (models.DiskFault).
func faultProblem(cluster, node string, f models.DiskFault) Problem {
	kind, what := KindDiskError, "its disk failed a write"
	if f.Kind == models.DiskFull {
		kind, what = KindDiskFull, "its disk is full"
	}
	return Problem{Severity: Critical, Kind: kind, Link: "#overview", Cluster: cluster, Node: node, Since: f.Since,
		Message: fmt.Sprintf("storage node %s refuses writes: %s (write-ahead log at %s: %s); its shard leaderships went to in-sync replicas "+
			"and its RF 1 shards answer 507: free space or fix the disk, it retries and rejoins its in-sync sets by itself",
			node, what, f.Path, f.Error)}
}

// pressureProblem reports a storage node that deleted the oldest blocks of
// its shards because its data disk passed --retention-max-disk-pct.
func pressureProblem(cluster, node string, p models.DiskPressure) Problem {
	return Problem{Severity: Warning, Kind: KindDiskPressure, Link: "#overview", Cluster: cluster, Node: node, Since: p.At,
		Message: fmt.Sprintf("storage node %s: data disk %d%% full, past --retention-max-disk-pct %d: deleted %d of its oldest blocks "+
			"(those whose points all precede %s); add disk, lower retentions, or add nodes",
			node, p.UsedPct, p.LimitPct, p.Blocks, time.Unix(0, p.Before).UTC().Format(time.RFC3339))}
}
