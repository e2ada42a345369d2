package master

import (
	"strings"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
)

// termSlots bounds the shard numbers kept in a database's slice of terms
// (meta.MaxShards: no database has more shards); a record's id past it,
// or not a ShardID at all, is kept by its id.
const termSlots = 4096

// shardTerm is what the live records of a cluster say of one shard: the
// highest max_term (rec: recordedTermOf) and the highest of every max_term
// and seen_term (both: recordsTermOf).
type shardTerm struct{ rec, both int64 }

// liveTerms is shardTerm for every shard a live record of one cluster
// names, computed once per version of its live nodes (derived), per
// database and shard number: the failover check of a dead domain reads
// ~32,000 shards' terms a pass, and two lookups in 32,000-entry maps keyed
// by the shard's id were a third of the check.
type liveTerms struct {
	dbs   map[string]*dbTerms
	none  *dbTerms // a database no record names
	other map[string]shardTerm
}

// dbTerms is liveTerms for one database (ShardInputs.terms).
type dbTerms struct {
	t     []shardTerm // by shard number, < termSlots
	other map[string]shardTerm
}

// of is the terms of shard (id its ShardID).
func (d *dbTerms) of(shard int, id string) shardTerm {
	switch {
	case shard >= 0 && shard < len(d.t):
		return d.t[shard]
	case shard >= 0 && shard < termSlots:
		return shardTerm{}
	}
	return d.other[id]
}

// forDB is db's terms.
func (lt *liveTerms) forDB(db string) *dbTerms {
	if d, ok := lt.dbs[db]; ok {
		return d
	}
	return lt.none
}

// liveTermsOf reads every live record's max_term and seen_term once.
func liveTermsOf(live statemachine.Map[models.StorageNode]) *liveTerms {
	lt := &liveTerms{dbs: map[string]*dbTerms{}, other: map[string]shardTerm{}}
	lt.none = &dbTerms{other: lt.other}
	var last *dbTerms // a record names its shards database by database, mostly
	var lastDB string
	add := func(id string, t int64, rec bool) {
		db, shard, ok := termSlot(id)
		if !ok {
			st := lt.other[id]
			lt.other[id] = raise(st, t, rec)
			return
		}
		if last == nil || db != lastDB {
			last = lt.dbs[db]
			if last == nil {
				last = &dbTerms{other: lt.other}
				lt.dbs[db] = last
			}
			lastDB = db
		}
		if shard >= len(last.t) {
			last.t = append(last.t, make([]shardTerm, shard+1-len(last.t))...)
		}
		last.t[shard] = raise(last.t[shard], t, rec)
	}
	for _, n := range live.All() {
		for id, t := range n.MaxTerm {
			add(id, t, true)
		}
		for id, t := range n.SeenTerm {
			add(id, t, false)
		}
	}
	return lt
}

// raise is st with term t of a record's max_term (rec) or seen_term.
func raise(st shardTerm, t int64, rec bool) shardTerm {
	if rec {
		st.rec = max(st.rec, t)
	}
	st.both = max(st.both, t)
	return st
}

// termSlot splits a shard id as models.ShardID makes it, with a shard
// number below termSlots: exactly the ids ShardID(db, shard) gives for
// such a number (no sign, no leading zero), so that a lookup by number
// finds what a lookup by id would.
func termSlot(id string) (db string, shard int, ok bool) {
	i := strings.LastIndexByte(id, '/')
	num := id[i+1:]
	if i < 0 || len(num) == 0 || len(num) > 4 || (num[0] == '0' && len(num) > 1) {
		return "", 0, false
	}
	for _, c := range []byte(num) {
		if c < '0' || c > '9' {
			return "", 0, false
		}
		shard = shard*10 + int(c-'0')
	}
	if shard >= termSlots {
		return "", 0, false
	}
	return id[:i], shard, true
}
