// Package verify checks invariants in-process where they can break (etcd's
// verify pattern): terms only grow, one leader per shard term, the leader is
// in its in-sync set. The checks run when the environment has
// CAIRN_VERIFY=1 (the tests, the end-to-end suite and the nemesis set it)
// and cost nothing otherwise; a violation panics in verify mode, naming the
// invariant and the values that broke it, so a test fails at the step that
// broke it rather than long after.
package verify

import (
	"fmt"
	"os"
	"slices"
)

// Env is the environment variable that switches the checks on ("1").
const Env = "CAIRN_VERIFY"

// On reports whether the checks run.
func On() bool { return os.Getenv(Env) == "1" }

// fail panics with the violation in verify mode.
func fail(format string, args ...any) {
	if On() {
		panic(fmt.Sprintf("cairn invariant violated: "+format, args...))
	}
}

// ShardTerm checks a shard's next published state against its previous one
// (same incarnation of the database): the term never goes down, and a
// leader other than the previous one comes with a higher term, so that one
// term has one leader.
func ShardTerm(shard, prevLeader string, prevTerm int64, leader string, term int64) {
	if !On() {
		return
	}
	switch {
	case term < prevTerm:
		fail("shard %s: term went down from %d to %d", shard, prevTerm, term)
	case term == prevTerm && leader != prevLeader && prevLeader != "" && leader != "":
		fail("shard %s: term %d has two leaders, %s and %s", shard, term, prevLeader, leader)
	}
}

// LeaderInSync checks that an in-sync set a leader publishes holds it.
func LeaderInSync(shard, leader string, term int64, set []string) {
	if On() && !slices.Contains(set, leader) {
		fail("shard %s: the in-sync set %v of term %d does not hold its leader %s", shard, set, term, leader)
	}
}
