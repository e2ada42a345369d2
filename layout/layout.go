// Package layout states Cairn's package graph: which layer every package sits
// in, and the edges that must never appear. Its test checks the real graph
// (go list) against these rules and keeps the README's drawing of it true.
//
// A package may import only packages of a lower layer, so the arrows point
// one way; a new package must be given a layer here before the test passes.
package layout

// Module is the module path the tables below are relative to.
const Module = "github.com/cairn-db/cairn"

// Layers lists the packages bottom-up; index = layer.
var Layers = [][]string{
	// Files replaced whole, crash-safe.
	{"atomicfile"},
	// Plain data and small mechanisms.
	{"models", "logrepeat", "backoff", "gopool", "certs", "peerauth", "config", "history",
		"storage/lineproto", "placement", "kv/embedded", "web/console"},
	// The etcd key-value layer and the shard engine.
	{"kv", "storage/engine"},
	// The local state copy, query evaluation, test fixtures over the etcd layer.
	{"statemachine", "query", "kv/etcdtest", "kv/storetest"},
	// What reads the state or speaks a wire protocol.
	{"storage/client", "problems", "influx", "backup"},
	// The roles: master, metadata changes, data path, storage node.
	{"master", "meta", "broker", "storage"},
	// HTTP handlers.
	{"web"},
	// Wiring of the roles into one process.
	{"app"},
	// The whole cluster in one process, for cairn simulate cluster.
	{"simcluster"},
	// The binary.
	{"cmd/cairn"},
}

// Forbidden are edges the layers alone would allow but that must not exist,
// with the reason.
var Forbidden = []struct {
	From, To, Why string
}{
	{"broker", "storage/engine", "the broker speaks to storage nodes through storage/client, never their engine's encoding"},
	{"meta", "storage/engine", "metadata changes never touch shard data"},
}

// Outside are packages left out of the graph: test suites and test-only
// helpers that may import anything.
var Outside = map[string]bool{
	"e2e":                     true,
	"layout":                  true,
	"deploy":                  true,
	"certs/certstest":         true,
	"web/console/browsertest": true,
}
