// Package layout states Cairn's package graph: which layer every package sits
// in, and the edges that must never appear. Its test checks the real graph
// (go list) against these rules and keeps the README's drawing of it true.
//
// A package may import only packages of a lower layer, so the arrows point
// one way; a new package must be given a layer here before the test passes.
// Forbidden edges are checked transitively: a package must not link the
// target through any chain of imports.
package layout

// Module is the module path the tables below are relative to.
const Module = "github.com/cairn-db/cairn"

// TopLevel are the only top-level folders that may hold Go packages: the
// design card's roles and layers, the binary, the end-to-end suite and one
// folder of small mechanisms.
var TopLevel = []string{
	"app", "broker", "cmd", "config", "coordinator", "e2e", "internal",
	"models", "statemachine", "storage", "web",
}

// Layers lists the packages bottom-up; index = layer.
var Layers = [][]string{
	// Files replaced whole, crash-safe.
	{"internal/atomicfile"},
	// Plain data and small mechanisms.
	{"models", "internal/verify", "internal/logrepeat", "internal/backoff", "internal/gopool", "internal/certs",
		"internal/peerauth", "config",
		"coordinator/placement", "coordinator/kv/embedded", "web/console"},
	// Line protocol, whose points carry models' field types; the console's
	// history rings, in models' types.
	{"storage/lineproto", "internal/history"},
	// The replicated entry's encoding, below the engine and the client.
	{"storage/wire"},
	// The etcd key-value layer and the shard engine.
	{"coordinator/kv", "storage/engine"},
	// The local state copy, query evaluation, test fixtures over the etcd layer.
	{"statemachine", "broker/query", "coordinator/kv/etcdtest", "coordinator/kv/storetest"},
	// What reads the state or speaks a wire protocol.
	{"storage/client", "internal/problems", "broker/influx", "internal/backup"},
	// The roles: master, metadata changes, data path, storage node.
	{"coordinator/master", "coordinator/meta", "broker", "storage"},
	// HTTP handlers.
	{"web"},
	// Wiring of the roles into one process.
	{"app"},
	// The whole cluster in one process, for cairn simulate cluster.
	{"internal/simcluster", "internal/benchwrite"},
	// The binary.
	{"cmd/cairn"},
}

// Forbidden are edges the layers alone would allow but that must not exist,
// directly or through other packages, with the reason. To may be a Cairn
// package (relative to Module) or a full import path of a dependency.
var Forbidden = []struct {
	From, To, Why string
}{
	{"coordinator/meta", "storage/engine", "metadata changes never touch shard data"},
	{"coordinator/master", "storage/engine", "the master decides placement and failover from state, never from shard files"},
	{"broker", "storage/engine", "the broker routes and merges; shards are read on the storage nodes"},
	{"broker", "go.etcd.io/bbolt", "the broker holds no shard files"},
	{"broker/query", "storage/engine", "the query evaluates over its own Source interface, which the engine implements"},
	{"broker/query", "go.etcd.io/bbolt", "the query planner holds no shard files"},
}

// Outside are packages left out of the graph: test suites and test-only
// helpers that may import anything.
var Outside = map[string]bool{
	"e2e":                      true,
	"internal/layout":          true,
	"internal/certs/certstest": true,
	"web/console/browsertest":  true,
}
