// Package config owns a Cairn node's configuration: the node flags, their
// CAIRN_* environment variables and TOML config-file keys, the defaults, the
// validation that turns a bad value into an operator-readable message, the
// help text, the persistent node id and the process logger.
//
// One table of options (options.go) drives every source, so a flag, its env
// var, its file key, its help line and its validation can never drift apart.
package config

import (
	"flag"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Role names, in the canonical order roles are listed and started.
const (
	RoleEtcd    = "etcd"
	RoleMaster  = "master"
	RoleBroker  = "broker"
	RoleStorage = "storage"
)

// RoleStandalone is the --role value that expands to every role.
const RoleStandalone = "standalone"

// Bounds of --etcd-quota-backend-bytes (0 keeps etcd's default).
const (
	MinEtcdQuotaBytes = 1 << 20
	MaxEtcdQuotaBytes = 64 << 30
)

// AllRoles lists every role in canonical order.
var AllRoles = []string{RoleEtcd, RoleMaster, RoleBroker, RoleStorage}

// NameRE is the rule for every user-chosen name in Cairn: node ids, storage
// clusters, databases, etcd member names.
var NameRE = regexp.MustCompile("^[A-Za-z0-9_-]{1,64}$")

// ValidName reports whether s follows NameRE.
func ValidName(s string) bool { return NameRE.MatchString(s) }

// ErrHelp is returned by Parse after it printed the help text for --help or
// -h. It wraps flag.ErrHelp so either sentinel works with errors.Is.
var ErrHelp = fmt.Errorf("config: %w", flag.ErrHelp)

// UsageError is a bad flag, environment variable, file or value: the process
// should print Msg and exit with status 2.
type UsageError struct {
	Msg string
}

func (e *UsageError) Error() string { return e.Msg }

// Config is everything a node needs to start. Build it with Parse, or with
// Default and field assignments followed by Validate.
type Config struct {
	// Roles is expanded and kept in canonical order (etcd, master, broker,
	// storage); "standalone" expands to all four.
	Roles []string
	// Standalone is true when the role was given as "standalone": the node
	// then also creates the default storage cluster on first start.
	Standalone bool
	// NodeID empty means: use the id kept in <data-dir>/node_id, created on
	// first start (see LoadOrCreateNodeID).
	NodeID  string
	DataDir string
	// HTTPAddr is the listen address of the REST API, console, metrics and
	// data plane.
	HTTPAddr string
	// AdvertiseAddr is the address other nodes and clients dial; it defaults
	// to HTTPAddr, with the host name substituted when HTTPAddr listens on
	// every interface.
	AdvertiseAddr string
	// EtcdEndpoints defaults to the embedded member's client URL when the
	// node has the etcd role, else to http://127.0.0.1:2379.
	EtcdEndpoints  []string
	Namespace      string
	StorageCluster string
	// NodeLabels (storage role) are this node's labels, e.g. zone=a: a
	// storage cluster's failure_domain names one of their keys.
	NodeLabels map[string]string
	// NodeWeight (storage role) is this node's relative capacity, 1 to
	// models.MaxNodeWeight.
	NodeWeight int
	// LeaseTTL bounds node liveness and the master lease.
	LeaseTTL time.Duration

	EtcdName               string
	EtcdListenClientURL    string
	EtcdListenPeerURL      string
	EtcdAdvertiseClientURL string // defaults to EtcdListenClientURL
	EtcdAdvertisePeerURL   string // defaults to EtcdListenPeerURL
	EtcdInitialCluster     string // defaults to "<etcd-name>=<advertise peer url>"
	EtcdClusterState       string // "new" or "existing"
	// EtcdQuotaBackendBytes is the embedded member's space quota; 0 means
	// etcd's default.
	EtcdQuotaBackendBytes int64

	LogLevel  string // debug, info, warn or error
	LogFormat string // console or json

	// ClusterSecret, when set, is proven on every node-to-node request and
	// required by the internal API (package peerauth).
	ClusterSecret string
	// AdminToken, WriteToken and ReadToken guard the scopes of the public
	// API (admin > write > read); see web.Tokens.
	AdminToken string
	WriteToken string
	ReadToken  string
	// The *File fields name files holding the secrets above; Validate reads
	// them into the secret fields.
	ClusterSecretFile, AdminTokenFile, WriteTokenFile, ReadTokenFile string
	// SecretFlags names the secret options given as command-line flags
	// (visible in ps), for a warning at start.
	SecretFlags []string

	// TLS: certificate and key served on --http-addr and presented to
	// peers, the CA verifying peers, the CA verifying client certificates
	// on the internal API.
	TLSCert, TLSKey, TLSCA, TLSClientCA string

	// Client TLS and authentication for the etcd endpoints. On a node with
	// the etcd role, the CA and certificate default to the member's own
	// (--etcd-trusted-ca-file, --etcd-cert-file).
	EtcdCACert   string
	EtcdCert     string
	EtcdKey      string
	EtcdUsername string
	EtcdPassword string
	// EtcdPasswordFile names a file holding EtcdPassword.
	EtcdPasswordFile string

	// TLS of the embedded member: served to clients (and the CA that
	// verifies their certificates, required with EtcdClientCertAuth) and
	// to its peers (likewise).
	EtcdCertFile, EtcdKeyFile, EtcdTrustedCAFile             string
	EtcdClientCertAuth                                       bool
	EtcdPeerCertFile, EtcdPeerKeyFile, EtcdPeerTrustedCAFile string
	EtcdPeerClientCertAuth                                   bool

	// MinInsyncReplicas is how many in-sync replicas (the leader included)
	// must hold a write before it is acknowledged.
	MinInsyncReplicas int
	// DefaultShards, DefaultReplicaFactor and DefaultStorageCluster shape
	// the databases InfluxQL's CREATE DATABASE makes (Telegraf sends it on
	// start); the REST API always says them.
	DefaultShards         int
	DefaultReplicaFactor  int
	DefaultStorageCluster string
	// RebalanceDelay is how long the master waits after membership changes
	// before moving replicas, so a restarting node does not trigger moves.
	RebalanceDelay time.Duration
	// ShardDropDelay is how long unassigned shard data is kept before it is
	// deleted.
	ShardDropDelay time.Duration
	// RetentionCheckInterval is how often a storage node drops the points
	// its databases' retentions expired.
	RetentionCheckInterval time.Duration
	// RetentionMaxDiskPct (storage role), when above 0, is the share of
	// the data dir's file system past which the node deletes the oldest
	// blocks of its shards.
	RetentionMaxDiskPct int
	// HistoryInterval is how often a node samples its metrics for the
	// console's charts.
	HistoryInterval time.Duration
	// WriteTimeout bounds how long a write waits for its shards (an offline
	// one, a failover) before it answers 503 with the cause.
	WriteTimeout time.Duration

	// Limits on what one request may make a node hold in memory.
	WriteMaxBodyBytes int // bytes of one write body
	WriteMaxPoints    int // points of one write batch
	// Limits on one line of a write: a line over one is dropped (a
	// partial write), never the batch.
	WriteMaxSeriesKeyBytes int // metric,tags#field, escaped; at most MaxSeriesKeyBytes
	WriteMaxTagValueBytes  int
	WriteMaxNameBytes      int // measurement, tag key, field key
	WriteMaxTags           int // tags of one line
	QueryMaxSeries         int // series of one query answer
	QueryMaxPoints         int // points of one query answer
	QueryMaxBytes          int // text of one /query statement
	// QueryTimeout bounds one /query request's run, shards included.
	QueryTimeout time.Duration
	// MemtableMaxBytes is the memory budget of a storage node's memtables
	// together; 0 means the engine's default (1/64 of memory, 32-64 MiB).
	MemtableMaxBytes int64
	// MemoryLimit is the Go runtime's soft memory limit in bytes; 0 means
	// the default (MemoryLimitFor).
	MemoryLimit int64
	// WriteMaxInflightBytes bounds the write body bytes held at once; 0
	// means 2x WriteMaxBodyBytes, at least 64 MiB (InflightWriteBytes).
	WriteMaxInflightBytes int64
	// WriteBodyTimeout is how long a write request may take to send its
	// body; a slower sender loses its request.
	WriteBodyTimeout time.Duration

	// Insecure silences the start-up warnings about surfaces left open on
	// a non-loopback address.
	Insecure bool
	// FaultInjection serves POST /internal/v1/faults, which makes the
	// storage role's log writes fail on demand (drills and tests only).
	FaultInjection bool

	// ConfigFile is the config file Parse loaded, if any.
	ConfigFile string
	// Version is the binary's version (set by main, not an option); it labels
	// cairn_build_info.
	Version string
}

// Default returns the configuration of a standalone node with every value at
// its documented default. Derived values (advertise addresses, etcd
// endpoints, initial cluster) are left empty for Validate to fill.
func Default() Config {
	return Config{
		Roles:               slices.Clone(AllRoles),
		Standalone:          true,
		DataDir:             "./cairn-data",
		HTTPAddr:            "127.0.0.1:9000",
		Namespace:           "/cairn",
		StorageCluster:      "default",
		NodeWeight:          1,
		LeaseTTL:            3 * time.Second,
		EtcdName:            "default",
		EtcdListenClientURL: "http://127.0.0.1:2379",
		EtcdListenPeerURL:   "http://127.0.0.1:2380",
		EtcdClusterState:    "new",
		LogLevel:            "info",
		// json is the safe choice when nobody says whether stderr is a
		// terminal; Parse switches to console for a terminal.
		LogFormat:              "json",
		MinInsyncReplicas:      1,
		DefaultShards:          4,
		DefaultReplicaFactor:   1,
		DefaultStorageCluster:  "default",
		RebalanceDelay:         30 * time.Second,
		ShardDropDelay:         5 * time.Minute,
		RetentionCheckInterval: time.Minute,
		WriteMaxBodyBytes:      32 << 20,
		WriteMaxPoints:         200_000,
		WriteMaxSeriesKeyBytes: 16 << 10,
		WriteMaxTagValueBytes:  8 << 10,
		WriteMaxNameBytes:      1 << 10,
		WriteMaxTags:           256,
		QueryMaxSeries:         10_000,
		QueryMaxPoints:         1_000_000,
		QueryMaxBytes:          256 << 10,
		QueryTimeout:           time.Minute,
		HistoryInterval:        10 * time.Second,
		WriteTimeout:           4 * time.Second,
		WriteBodyTimeout:       10 * time.Second,
	}
}

// InflightWriteBytes is WriteMaxInflightBytes with its default resolved.
func (c *Config) InflightWriteBytes() int64 {
	if c.WriteMaxInflightBytes > 0 {
		return c.WriteMaxInflightBytes
	}
	return max(2*int64(c.WriteMaxBodyBytes), 64<<20)
}

// HasRole reports whether the node runs role r.
func (c *Config) HasRole(r string) bool { return slices.Contains(c.Roles, r) }

// Redacted returns a copy safe to log: secrets are replaced by a marker.
func (c Config) Redacted() Config {
	const marker = "<redacted>"
	if c.AdminToken != "" {
		c.AdminToken = marker
	}
	for _, f := range []*string{&c.EtcdPassword, &c.ClusterSecret, &c.WriteToken, &c.ReadToken} {
		if *f != "" {
			*f = marker
		}
	}
	c.SecretFlags = slices.Clone(c.SecretFlags)
	c.Roles = slices.Clone(c.Roles)
	c.EtcdEndpoints = slices.Clone(c.EtcdEndpoints)
	return c
}
