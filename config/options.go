package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// valueKind says how a TOML value converts to the option's text form.
type valueKind int

const (
	kindString   valueKind = iota
	kindList               // a comma list, or a TOML array of strings
	kindDuration           // a Go duration string such as "3s"
	kindInt
	kindBool // a flag that may stand alone (--insecure), or true/false
)

// option is one node setting: flag --name, env CAIRN_NAME, file key name.
type option struct {
	name  string
	kind  valueKind
	group string
	help  string
	// defText describes the default in the help text when it is derived
	// rather than the plain value in Default().
	defText string
	// secret options never show their value in help or logs.
	secret bool
	get    func(*Config) string
	// set parses raw into the Config; its error is only the reason, the
	// caller names the source and the value.
	set func(c *Config, raw string) error
}

// envName is the environment variable for an option: CAIRN_HTTP_ADDR for
// http-addr.
func envName(name string) string {
	return "CAIRN_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Usage sections, in the order the help text prints them.
const (
	groupNode    = "Node"
	groupCluster = "Cluster"
	groupSec     = "Security (prefer the *-file flags or CAIRN_* env vars for secrets: flag values show in ps)"
	groupEtcd    = "Embedded etcd member (role etcd)"
	groupTLS     = "etcd client security"
	groupLog     = "Logging"
	groupLimits  = "Limits (each request's memory)"
)

var groups = []string{groupNode, groupCluster, groupSec, groupLimits, groupEtcd, groupTLS, groupLog}

// limitOpt is a positive whole-number limit.
func limitOpt(name, help string, field func(*Config) *int) option {
	return countOpt(name, groupLimits, help, field)
}

// countOpt is a whole number of at least 1.
func countOpt(name, group, help string, field func(*Config) *int) option {
	return option{
		name: name, kind: kindInt, group: group, help: help,
		get: func(c *Config) string { return strconv.Itoa(*field(c)) },
		set: func(c *Config, raw string) error {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 1 {
				return errors.New("want a whole number of at least 1")
			}
			*field(c) = n
			return nil
		},
	}
}

// MaxSeriesKeyBytes is the storage engine's own bound on a series key
// (storage/engine.MaxSeriesKeyBytes, which app's tests hold equal):
// --write-max-series-key-bytes cannot be set above it.
const MaxSeriesKeyBytes = 32<<10 - 512

// limitOptMax is limitOpt with an upper bound.
func limitOptMax(name, help string, most int, field func(*Config) *int) option {
	o := limitOpt(name, help, field)
	set := o.set
	o.set = func(c *Config, raw string) error {
		if n, err := strconv.Atoi(raw); err == nil && n > most {
			return fmt.Errorf("want at most %d", most)
		}
		return set(c, raw)
	}
	return o
}

func stringOpt(name, group, help string, field func(*Config) *string, check func(string) error) option {
	return option{
		name: name, kind: kindString, group: group, help: help,
		get: func(c *Config) string { return *field(c) },
		set: func(c *Config, raw string) error {
			if check != nil {
				if err := check(raw); err != nil {
					return err
				}
			}
			*field(c) = raw
			return nil
		},
	}
}

// optional lets a derived option stay empty until Validate fills it.
func optional(check func(string) error) func(string) error {
	return func(s string) error {
		if s == "" {
			return nil
		}
		return check(s)
	}
}

func durationOpt(name, group, help string, minimum time.Duration, field func(*Config) *time.Duration, extra func(time.Duration) error) option {
	return option{
		name: name, kind: kindDuration, group: group, help: help,
		get: func(c *Config) string { return field(c).String() },
		set: func(c *Config, raw string) error {
			d, err := parseDuration(raw, minimum)
			if err != nil {
				return err
			}
			if extra != nil {
				if err := extra(d); err != nil {
					return err
				}
			}
			*field(c) = d
			return nil
		},
	}
}

var roleReason = "want standalone or a comma list of " + strings.Join(AllRoles, ",")

func setRoles(c *Config, raw string) error {
	parts := SplitList(strings.ToLower(raw))
	if len(parts) == 1 && parts[0] == RoleStandalone {
		c.Roles = append([]string(nil), AllRoles...)
		c.Standalone = true
		return nil
	}
	if len(parts) == 0 {
		return errors.New(roleReason)
	}
	chosen := map[string]bool{}
	for _, p := range parts {
		if p == RoleStandalone {
			return errors.New("standalone already means every role and cannot be combined with others")
		}
		known := false
		for _, r := range AllRoles {
			known = known || p == r
		}
		if !known {
			return errors.New(roleReason)
		}
		chosen[p] = true
	}
	c.Roles = c.Roles[:0:0]
	for _, r := range AllRoles {
		if chosen[r] {
			c.Roles = append(c.Roles, r)
		}
	}
	c.Standalone = false
	return nil
}

func getRoles(c *Config) string {
	if c.Standalone {
		return RoleStandalone
	}
	return strings.Join(c.Roles, ",")
}

// wholeSeconds: etcd grants leases in whole seconds, so 2.5s would silently
// become 2s.
func wholeSeconds(d time.Duration) error {
	if d%time.Second != 0 {
		return errors.New("must be a whole number of seconds (etcd leases are granted in seconds)")
	}
	return nil
}

// options is the single source of truth for flags, env vars, file keys,
// help text and validation order.
var options = []option{
	{
		name: "role", kind: kindList, group: groupNode,
		help: "what this node runs: standalone (all roles, embedded single-member etcd) or a comma list of etcd,master,broker,storage",
		get:  getRoles, set: setRoles,
	},
	withDefText(stringOpt("node-id", groupNode, "stable node identity; keep unset to generate one on first start",
		func(c *Config) *string { return &c.NodeID }, optional(checkName)),
		"generated once and kept in <data-dir>/node_id"),
	stringOpt("data-dir", groupNode, "directory for the node id, shard data and the local state backup",
		func(c *Config) *string { return &c.DataDir }, checkNonEmpty),
	stringOpt("http-addr", groupNode, "listen address of the REST API, web console, metrics and data plane",
		func(c *Config) *string { return &c.HTTPAddr }, checkAddr),
	withDefText(stringOpt("advertise-addr", groupNode, "address other nodes and clients use to reach this node's http-addr",
		func(c *Config) *string { return &c.AdvertiseAddr }, optional(checkAdvertiseAddr)),
		"the http-addr (with this host's name if it listens on all interfaces)"),
	{
		name: "etcd-endpoints", kind: kindList, group: groupCluster,
		help:    "comma list of etcd client URLs holding the cluster metadata",
		defText: "the embedded member when the role has etcd, else http://127.0.0.1:2379",
		get:     func(c *Config) string { return strings.Join(c.EtcdEndpoints, ",") },
		set: func(c *Config, raw string) error {
			list := SplitList(raw)
			if raw != "" {
				if err := checkURLList(list); err != nil {
					return err
				}
			}
			c.EtcdEndpoints = list
			return nil
		},
	},
	stringOpt("namespace", groupCluster, "etcd key prefix for all of this cluster's keys; clusters sharing an etcd need distinct namespaces",
		func(c *Config) *string { return &c.Namespace }, checkNamespace),
	stringOpt("storage-cluster", groupCluster, "storage cluster this storage node joins",
		func(c *Config) *string { return &c.StorageCluster }, checkName),
	{
		name: "node-labels", kind: kindList, group: groupCluster, defText: "none",
		help: "storage role: this node's labels as key=value pairs, e.g. zone=a,rack=r7; a storage cluster's failure_domain names one of the keys, and replicas of a shard go to distinct values of it",
		get:  func(c *Config) string { return FormatLabels(c.NodeLabels) },
		set: func(c *Config, raw string) error {
			labels, err := ParseLabels(raw)
			if err != nil {
				return err
			}
			c.NodeLabels = labels
			return nil
		},
	},
	{
		name: "node-weight", kind: kindInt, group: groupCluster,
		help: "storage role: this node's relative capacity; nodes hold replicas in proportion to their weights",
		get:  func(c *Config) string { return strconv.Itoa(c.NodeWeight) },
		set: func(c *Config, raw string) error {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 1 || n > MaxNodeWeight {
				return fmt.Errorf("want a whole number from 1 to %d", MaxNodeWeight)
			}
			c.NodeWeight = n
			return nil
		},
	},
	durationOpt("lease-ttl", groupCluster, "node liveness and master lease: a dead node is noticed after about this long (min 2s)",
		2*time.Second, func(c *Config) *time.Duration { return &c.LeaseTTL }, wholeSeconds),
	countOpt("min-insync-replicas", groupCluster, "in-sync replicas (leader included) that must hold a write before it is acknowledged",
		func(c *Config) *int { return &c.MinInsyncReplicas }),
	countOpt("default-shards", groupCluster, "shards of a database created by InfluxQL's CREATE DATABASE (Telegraf, the influx CLI)",
		func(c *Config) *int { return &c.DefaultShards }),
	countOpt("default-replica-factor", groupCluster, "replica factor of a database created by InfluxQL's CREATE DATABASE (unless it says REPLICATION n)",
		func(c *Config) *int { return &c.DefaultReplicaFactor }),
	stringOpt("default-storage-cluster", groupCluster, "storage cluster of a database created by InfluxQL's CREATE DATABASE",
		func(c *Config) *string { return &c.DefaultStorageCluster }, checkName),
	durationOpt("rebalance-delay", groupCluster, "wait after nodes join or leave before moving replicas or spreading leaders again, so a restart does not shuffle shards",
		0, func(c *Config) *time.Duration { return &c.RebalanceDelay }, nil),
	{
		name: "memtable-max-bytes", kind: kindInt, group: groupNode, defText: "0: 1/64 of memory, 32-64 MiB",
		help: "memory budget of the storage node's in-memory write buffers together; reaching it flushes them to compressed blocks",
		get:  func(c *Config) string { return strconv.FormatInt(c.MemtableMaxBytes, 10) },
		set: func(c *Config, raw string) error {
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil || (n != 0 && n < 1<<20) {
				return errors.New("want a whole number of bytes of at least 1048576, or 0 for the default")
			}
			c.MemtableMaxBytes = n
			return nil
		},
	},
	{
		name: "memory-limit", kind: kindInt, group: groupNode, defText: "0: on a storage node 3x (the memtable budget + the series indexes) + 2x the indexes + 128 MiB + 6x --write-max-inflight-bytes, following the indexes (GOMEMLIMIT, when set, instead); else none",
		help: "soft limit of the process's Go memory (heap, stacks, runtime), in bytes: past it the garbage collector runs more often to stay under it; it does not cap the shard files' page cache",
		get:  func(c *Config) string { return strconv.FormatInt(c.MemoryLimit, 10) },
		set: func(c *Config, raw string) error {
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil || (n != 0 && n < 64<<20) {
				return errors.New("want a whole number of bytes of at least 67108864, or 0 for the default")
			}
			c.MemoryLimit = n
			return nil
		},
	},
	durationOpt("shard-drop-delay", groupCluster, "how long a storage node keeps the data of a shard no longer assigned to it before deleting it (guards against an emptied or replaced etcd)",
		0, func(c *Config) *time.Duration { return &c.ShardDropDelay }, nil),
	durationOpt("retention-check-interval", groupCluster, "how often a storage node deletes the blocks its databases' retentions expired and gives their space back (reads stop answering expired points at once)",
		time.Second, func(c *Config) *time.Duration { return &c.RetentionCheckInterval }, maxDuration(24*time.Hour)),
	{
		name: "retention-max-disk-pct", kind: kindInt, group: groupCluster, defText: "0: none",
		help: "storage role: past this share of its data dir's file system in use, a storage node deletes the oldest blocks of its shards until it is under (a warning problem retention_disk_pressure says so)",
		get:  func(c *Config) string { return strconv.Itoa(c.RetentionMaxDiskPct) },
		set: func(c *Config, raw string) error {
			n, err := strconv.Atoi(raw)
			if err != nil || n < 0 || n > 99 {
				return fmt.Errorf("want a whole percentage from 1 to 99, or 0 for none")
			}
			c.RetentionMaxDiskPct = n
			return nil
		},
	},
	durationOpt("write-timeout", groupCluster, "longest a write waits for its shards (an offline shard, a failover) before it answers 503 with the cause; keep it under your clients' timeouts (Telegraf and the Influx Go clients: 5s)",
		100*time.Millisecond, func(c *Config) *time.Duration { return &c.WriteTimeout }, maxDuration(5*time.Minute)),
	durationOpt("history-interval", groupNode, "sampling interval of the console's charts; each node keeps the last hour in memory (at most 3600 samples)",
		time.Second, func(c *Config) *time.Duration { return &c.HistoryInterval }, maxDuration(5*time.Minute)),
	withSecret(stringOpt("cluster-secret", groupSec, "secret shared by every node of the cluster: node-to-node requests carry an HMAC proof of it and the internal API refuses requests without one; unset leaves the internal API open (prefer --cluster-secret-file or CAIRN_CLUSTER_SECRET)",
		func(c *Config) *string { return &c.ClusterSecret }, nil)),
	fileOpt("cluster-secret-file", "file holding --cluster-secret (trailing newline ignored)", func(c *Config) *string { return &c.ClusterSecretFile }),
	withSecret(stringOpt("admin-token", groupSec, "bearer token for DDL, storage config, drain, leader transfer, rebalance and /debug/pprof; also accepted for writes and reads; unset: admin calls are open (prefer --admin-token-file or CAIRN_ADMIN_TOKEN)",
		func(c *Config) *string { return &c.AdminToken }, nil)),
	fileOpt("admin-token-file", "file holding --admin-token", func(c *Config) *string { return &c.AdminTokenFile }),
	withSecret(stringOpt("write-token", groupSec, "token for writes (/api/v1/write and the InfluxDB write endpoints); also accepted for reads; unset: writes need the admin token if one is set, else are open (prefer --write-token-file or CAIRN_WRITE_TOKEN)",
		func(c *Config) *string { return &c.WriteToken }, nil)),
	fileOpt("write-token-file", "file holding --write-token", func(c *Config) *string { return &c.WriteTokenFile }),
	withSecret(stringOpt("read-token", groupSec, "token for queries, /metrics and reads of cluster state; unset: reads are open (prefer --read-token-file or CAIRN_READ_TOKEN)",
		func(c *Config) *string { return &c.ReadToken }, nil)),
	fileOpt("read-token-file", "file holding --read-token", func(c *Config) *string { return &c.ReadTokenFile }),
	fileOpt("tls-cert", "certificate (PEM) to serve the API, console and internal API over HTTPS and to present to peers; reloaded when the file changes; needs --tls-key", func(c *Config) *string { return &c.TLSCert }),
	fileOpt("tls-key", "private key (PEM) of --tls-cert", func(c *Config) *string { return &c.TLSKey }),
	fileOpt("tls-ca", "CA bundle (PEM) that verifies peer nodes' certificates; the system roots when unset", func(c *Config) *string { return &c.TLSCA }),
	fileOpt("tls-client-ca", "CA bundle (PEM) that verifies client certificates: the internal API then requires one (mTLS); the public API does not", func(c *Config) *string { return &c.TLSClientCA }),

	boolOpt("insecure", groupSec, "this node is knowingly open (no tokens, no cluster secret, plaintext or auth-less etcd) on a non-loopback address: silences the start-up warnings about it",
		func(c *Config) *bool { return &c.Insecure }),
	boolOpt("fault-injection", groupNode, "drills and tests only: serve POST /api/v1/debug/faults (admin scope), which makes this storage node's write-ahead log writes fail on demand ({\"disk\":\"full\"|\"error\"|\"\"}) to exercise fencing and failover; off: the endpoint answers 404",
		func(c *Config) *bool { return &c.FaultInjection }),

	limitOpt("write-max-body-bytes", "largest write body accepted, in bytes; a larger one gets 413 (send smaller batches)",
		func(c *Config) *int { return &c.WriteMaxBodyBytes }),
	limitOpt("write-max-points", "most points (field values) in one write batch; a larger batch gets 413 before it is decoded in full",
		func(c *Config) *int { return &c.WriteMaxPoints }),
	limitOptMax("write-max-series-key-bytes", "longest series key (measurement, tags and field, escaped) a write line may make; a line over it is dropped with a 400 partial write",
		MaxSeriesKeyBytes, func(c *Config) *int { return &c.WriteMaxSeriesKeyBytes }),
	limitOpt("write-max-tag-value-bytes", "longest tag value of a write line; a line over it is dropped with a 400 partial write",
		func(c *Config) *int { return &c.WriteMaxTagValueBytes }),
	limitOpt("write-max-name-bytes", "longest measurement, tag key or field key of a write line; a line over it is dropped with a 400 partial write",
		func(c *Config) *int { return &c.WriteMaxNameBytes }),
	limitOpt("write-max-tags", "most tags on one write line; a line with more is dropped with a 400 partial write",
		func(c *Config) *int { return &c.WriteMaxTags }),
	withDefText(option{
		name: "write-max-inflight-bytes", kind: kindInt, group: groupLimits,
		help: "write body bytes a node holds at once across all write requests (a parsed batch takes about 6x its body); past it a write waits, and after 5s gets 503 (retry)",
		get:  func(c *Config) string { return strconv.FormatInt(c.WriteMaxInflightBytes, 10) },
		set: func(c *Config, raw string) error {
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil || n < 0 {
				return errors.New("want a whole number of bytes, or 0 for the default")
			}
			c.WriteMaxInflightBytes = n
			return nil
		},
	}, "0: 2x --write-max-body-bytes, at least 64 MiB"),
	durationOpt("write-body-timeout", groupLimits, "longest a write request may take to send its body; a slower sender gets 400 and loses its connection, so trickling senders cannot hold the in-flight budget",
		100*time.Millisecond, func(c *Config) *time.Duration { return &c.WriteBodyTimeout }, nil),
	limitOpt("query-max-series", "most series one query may answer; past it the query gets 413 asking to narrow it (tag filters, shorter range)",
		func(c *Config) *int { return &c.QueryMaxSeries }),
	limitOpt("query-max-points", "most points one query may answer; past it the query gets 413 asking to narrow it; storage nodes stop reading once over",
		func(c *Config) *int { return &c.QueryMaxPoints }),
	limitOpt("query-max-bytes", "longest /query statement text, in bytes; a longer one gets 413 before it is parsed (parentheses may nest 100 deep)",
		func(c *Config) *int { return &c.QueryMaxBytes }),
	durationOpt("query-timeout", groupLimits, "longest run of one /query request, its shards' work included; past it the statement answers a timeout error and the shards stop (min 1s)",
		time.Second, func(c *Config) *time.Duration { return &c.QueryTimeout }, nil),

	stringOpt("etcd-name", groupEtcd, "member name, unique in the etcd cluster",
		func(c *Config) *string { return &c.EtcdName }, checkName),
	stringOpt("etcd-listen-client-url", groupEtcd, "URL the member serves clients on",
		func(c *Config) *string { return &c.EtcdListenClientURL }, checkURL),
	stringOpt("etcd-listen-peer-url", groupEtcd, "URL the member serves other members on",
		func(c *Config) *string { return &c.EtcdListenPeerURL }, checkURL),
	withDefText(stringOpt("etcd-advertise-client-url", groupEtcd, "client URL announced to clients",
		func(c *Config) *string { return &c.EtcdAdvertiseClientURL }, optional(checkURL)),
		"the listen client URL"),
	withDefText(stringOpt("etcd-advertise-peer-url", groupEtcd, "peer URL announced to other members",
		func(c *Config) *string { return &c.EtcdAdvertisePeerURL }, optional(checkURL)),
		"the listen peer URL"),
	withDefText(stringOpt("etcd-initial-cluster", groupEtcd, "every founding member as name=peer-url,...; must include this member",
		func(c *Config) *string { return &c.EtcdInitialCluster },
		optional(func(s string) error { _, err := parseInitialCluster(s); return err })),
		"this member alone: <etcd-name>=<advertise peer url>"),
	stringOpt("etcd-cluster-state", groupEtcd, "new to found a cluster, existing to join one that already runs",
		func(c *Config) *string { return &c.EtcdClusterState }, checkOneOf("new", "existing")),
	withDefText(option{
		name: "etcd-quota-backend-bytes", kind: kindInt, group: groupEtcd,
		help: "space the member's database may use before etcd raises its NOSPACE alarm and refuses metadata changes (reads and data writes go on)",
		get:  func(c *Config) string { return strconv.FormatInt(c.EtcdQuotaBackendBytes, 10) },
		set: func(c *Config, raw string) error {
			n, err := strconv.ParseInt(raw, 10, 64)
			if err != nil || (n != 0 && (n < MinEtcdQuotaBytes || n > MaxEtcdQuotaBytes)) {
				return fmt.Errorf("want 0 (etcd's default, 2 GiB) or a number of bytes from %d (1 MiB) to %d (64 GiB)", MinEtcdQuotaBytes, MaxEtcdQuotaBytes)
			}
			c.EtcdQuotaBackendBytes = n
			return nil
		},
	}, "0 (etcd's default, 2 GiB)"),

	memberFileOpt("etcd-cert-file", "certificate (PEM) the member serves to clients; needs --etcd-key-file and an https --etcd-listen-client-url",
		func(c *Config) *string { return &c.EtcdCertFile }),
	memberFileOpt("etcd-key-file", "private key (PEM) of --etcd-cert-file",
		func(c *Config) *string { return &c.EtcdKeyFile }),
	memberFileOpt("etcd-trusted-ca-file", "CA bundle (PEM) that verifies clients' certificates (with --etcd-client-cert-auth)",
		func(c *Config) *string { return &c.EtcdTrustedCAFile }),
	boolOpt("etcd-client-cert-auth", groupEtcd, "refuse etcd clients without a certificate signed by --etcd-trusted-ca-file; with etcd auth on, a client without a password logs in as its certificate's common name",
		func(c *Config) *bool { return &c.EtcdClientCertAuth }),
	memberFileOpt("etcd-peer-cert-file", "certificate (PEM) the member presents to its peers, as server and as client; needs --etcd-peer-key-file and an https --etcd-listen-peer-url",
		func(c *Config) *string { return &c.EtcdPeerCertFile }),
	memberFileOpt("etcd-peer-key-file", "private key (PEM) of --etcd-peer-cert-file",
		func(c *Config) *string { return &c.EtcdPeerKeyFile }),
	memberFileOpt("etcd-peer-trusted-ca-file", "CA bundle (PEM) that verifies the peers' certificates",
		func(c *Config) *string { return &c.EtcdPeerTrustedCAFile }),
	boolOpt("etcd-peer-client-cert-auth", groupEtcd, "refuse peers without a certificate signed by --etcd-peer-trusted-ca-file (set it on every member of a TLS cluster)",
		func(c *Config) *bool { return &c.EtcdPeerClientCertAuth }),

	withDefText(stringOpt("etcd-cacert", groupTLS, "CA bundle that verifies the etcd servers (https endpoints)",
		func(c *Config) *string { return &c.EtcdCACert }, nil), "none; with the etcd role, --etcd-trusted-ca-file"),
	withDefText(stringOpt("etcd-cert", groupTLS, "client certificate for etcd (needs --etcd-key); with etcd auth on and no --etcd-username, etcd takes its common name as the user",
		func(c *Config) *string { return &c.EtcdCert }, nil), "none; with the etcd role, --etcd-cert-file"),
	withDefText(stringOpt("etcd-key", groupTLS, "client private key for etcd (needs --etcd-cert)",
		func(c *Config) *string { return &c.EtcdKey }, nil), "none; with the etcd role, --etcd-key-file"),
	withDefText(stringOpt("etcd-username", groupTLS, "etcd user for password authentication (see cairn etcd-auth-setup)",
		func(c *Config) *string { return &c.EtcdUsername }, nil), "none"),
	withSecret(stringOpt("etcd-password", groupTLS, "password of --etcd-username (prefer --etcd-password-file or CAIRN_ETCD_PASSWORD: flags show in ps)",
		func(c *Config) *string { return &c.EtcdPassword }, nil)),
	withDefText(stringOpt("etcd-password-file", groupTLS, "file holding --etcd-password (trailing newline ignored)",
		func(c *Config) *string { return &c.EtcdPasswordFile }, nil), "none"),

	stringOpt("log-level", groupLog, "debug, info, warn or error",
		func(c *Config) *string { return &c.LogLevel }, checkOneOf("debug", "info", "warn", "error")),
	withDefText(stringOpt("log-format", groupLog, "console (human) or json (machines)",
		func(c *Config) *string { return &c.LogFormat }, checkOneOf("console", "json")),
		"console when stderr is a terminal, else json"),
}

func maxDuration(limit time.Duration) func(time.Duration) error {
	return func(d time.Duration) error {
		if d > limit {
			return fmt.Errorf("must be at most %s", limit)
		}
		return nil
	}
}

// boolOpt is a switch: --name alone means true.
func boolOpt(name, group, help string, field func(*Config) *bool) option {
	return option{
		name: name, kind: kindBool, group: group, help: help,
		get: func(c *Config) string { return strconv.FormatBool(*field(c)) },
		set: func(c *Config, raw string) error {
			v, err := strconv.ParseBool(raw)
			if err != nil {
				return errors.New("want true or false")
			}
			*field(c) = v
			return nil
		},
	}
}

// memberFileOpt is a TLS file of the embedded etcd member; default none.
func memberFileOpt(name, help string, field func(*Config) *string) option {
	return withDefText(stringOpt(name, groupEtcd, help, field, nil), "none")
}

func withDefText(o option, text string) option {
	o.defText = text
	return o
}

// fileOpt is a path option of the security group (a secret file or TLS
// material); its default is none.
func fileOpt(name, help string, field func(*Config) *string) option {
	return withDefText(stringOpt(name, groupSec, help, field, nil), "none")
}

func withSecret(o option) option {
	o.secret = true
	o.defText = "none"
	return o
}

func lookupOption(name string) (option, bool) {
	for _, o := range options {
		if o.name == name {
			return o, true
		}
	}
	return option{}, false
}

// source says where a raw value came from, for error messages.
type source struct {
	kind string // "flag", "env" or "file"
	path string // the file, for kind "file"
}

func (s source) invalid(o option, raw string, reason error) error {
	shown := raw
	if o.secret {
		shown = "<redacted>"
	}
	switch s.kind {
	case "env":
		return &UsageError{Msg: fmt.Sprintf("invalid %s %q: %v", envName(o.name), shown, reason)}
	case "file":
		return &UsageError{Msg: fmt.Sprintf("invalid %s = %q in %s: %v", o.name, shown, s.path, reason)}
	default:
		return &UsageError{Msg: fmt.Sprintf("invalid --%s %q: %v", o.name, shown, reason)}
	}
}
