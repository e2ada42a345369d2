package statemachine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cairn-db/cairn/models"
)

// ErrInvalid marks a value from etcd that decodes but cannot be used: the
// consumer ignores it (keeping what it held) rather than act on it.
var ErrInvalid = errors.New("invalid record")

// checkAssignment and checkShardStates check a record of the master-owned
// kinds where it enters the node, and fill fields an older or hand-written
// value may lack: a missing database name is the key's, a missing status is
// offline. Values written by another Cairn version or pretty-printed by hand
// are fine; values the master would act wrongly on are refused.
func checkAssignment(name string, a models.Assignment) (models.Assignment, error) {
	fail := func(err error) (models.Assignment, error) { return models.Assignment{}, err }
	if a.DB == "" {
		a.DB = name
	}
	if a.DB != name {
		return fail(fmt.Errorf("%w: assignment of %q stored under %q", ErrInvalid, a.DB, name))
	}
	for i, sh := range a.Shards {
		if sh.ID != i {
			return fail(fmt.Errorf("%w: assignment of %q: shard %d at position %d", ErrInvalid, name, sh.ID, i))
		}
		if len(sh.Replicas) == 0 {
			return fail(fmt.Errorf("%w: assignment of %q: shard %d has no replicas", ErrInvalid, name, i))
		}
		for j, r := range sh.Replicas {
			if !models.ValidName(r) || slices.Contains(sh.Replicas[:j], r) {
				return fail(fmt.Errorf("%w: assignment of %q: shard %d: bad or repeated replica %q", ErrInvalid, name, i, r))
			}
		}
	}
	return a, nil
}

func checkShardStates(name string, ss models.ShardStates) (models.ShardStates, error) {
	fail := func(err error) (models.ShardStates, error) { return models.ShardStates{}, err }
	if ss.DB == "" {
		ss.DB = name
	}
	if ss.DB != name {
		return fail(fmt.Errorf("%w: shard states of %q stored under %q", ErrInvalid, ss.DB, name))
	}
	ss.Shards = slices.Clone(ss.Shards)
	seen := map[int]bool{}
	for i, s := range ss.Shards {
		if s.ID < 0 || seen[s.ID] {
			return fail(fmt.Errorf("%w: shard states of %q: bad or repeated shard id %d", ErrInvalid, name, s.ID))
		}
		seen[s.ID] = true
		if s.Term < 0 {
			return fail(fmt.Errorf("%w: shard states of %q: shard %d has term %d", ErrInvalid, name, s.ID, s.Term))
		}
		switch s.Status {
		case models.StatusOnline:
			if !models.ValidName(s.Leader) {
				return fail(fmt.Errorf("%w: shard states of %q: shard %d online with leader %q", ErrInvalid, name, s.ID, s.Leader))
			}
		case models.StatusOffline:
		case "":
			// An older or hand-written value: offline until the master
			// re-elects a leader under a new term.
			ss.Shards[i].Status = models.StatusOffline
			if s.Reason == "" {
				ss.Shards[i].Reason = "no status stored"
			}
		default:
			return fail(fmt.Errorf("%w: shard states of %q: shard %d has status %q", ErrInvalid, name, s.ID, s.Status))
		}
	}
	return ss, nil
}
