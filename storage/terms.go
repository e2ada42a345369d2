package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/cairn-db/cairn/internal/atomicfile"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"go.uber.org/zap"
)

// ErrTermBehind: the published state asks a replica to lead or follow at a
// term below one it has already accepted. Terms never go backwards: that
// state is older than what the replica saw (a restored etcd), and the master
// must publish the shard above the replica's seen term first.
var ErrTermBehind = fmt.Errorf("published term below the replica's seen term: %w", ErrStaleTerm)

// ErrSuperseded: a follower fetched at a term of this shard above the one
// this replica leads at: a newer leadership exists, so this one stops
// writing until its term changes.
var ErrSuperseded = fmt.Errorf("leadership superseded by a newer term: %w", ErrStaleTerm)

// ErrBadTermFile: a seen-term file in the data dir does not decode. The
// replicas of its database stay closed (accepting a term without knowing
// the highest one seen could reuse a term): fix or delete the file.
var ErrBadTermFile = errors.New("storage: unreadable seen-term file")

// maxTermFile bounds a seen-term file read from disk (a few thousand shards).
const maxTermFile = 4 << 20

// termFile is the content of <dir>/<db>.terms.
type termFile struct {
	UID   string           `json:"uid"`
	Terms map[string]int64 `json:"terms"` // shard number -> highest term accepted
}

// termBook keeps, per replica, the highest term this node has accepted for
// it, one file per database next to the incarnation mark, written (and
// fsynced) before the replica acts at a higher term. A leadership elected at
// a term that wrote nothing leaves no trace in any log; this is its trace.
// The master reads it from the node record (seen_term) and from the
// failover answer, and publishes every new leadership above it.
type termBook struct {
	dir string // "" keeps the terms in memory only

	mu   sync.Mutex
	dbs  map[string]*termFile // loaded databases
	uids map[string]string    // the incarnation each loaded database was read for
}

func newTermBook(dir string) *termBook {
	return &termBook{dir: dir, dbs: map[string]*termFile{}, uids: map[string]string{}}
}

func (b *termBook) path(db string) string { return filepath.Join(b.dir, db+".terms") }

// load returns db's terms for incarnation uid, reading the file on first use.
// A file of another incarnation is ignored (its terms belong to a dropped
// database of the same name). Call with b.mu held.
func (b *termBook) loadLocked(db, uid string) (*termFile, error) {
	if f, ok := b.dbs[db]; ok && b.uids[db] == uid {
		return f, nil
	}
	f := &termFile{UID: uid, Terms: map[string]int64{}}
	if b.dir != "" {
		raw, err := readBounded(b.path(db), maxTermFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("%w: %s: %w", ErrBadTermFile, b.path(db), err)
		default:
			var disk termFile
			if err := json.Unmarshal(raw, &disk); err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrBadTermFile, b.path(db), err)
			}
			if disk.UID == uid {
				for s, t := range disk.Terms {
					if n, err := strconv.Atoi(s); err != nil || n < 0 || t < 0 {
						return nil, fmt.Errorf("%w: %s: bad entry %q: %d", ErrBadTermFile, b.path(db), s, t)
					}
					f.Terms[s] = t
				}
			}
		}
	}
	b.dbs[db], b.uids[db] = f, uid
	return f, nil
}

// seen is the highest term accepted for shard of db (incarnation uid).
func (b *termBook) seen(db, uid string, shard int) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, err := b.loadLocked(db, uid)
	if err != nil {
		return 0, err
	}
	return f.Terms[strconv.Itoa(shard)], nil
}

// raise records terms (shard -> term) of db that are above the seen ones,
// durably (one atomic file write for all of them) before it returns.
func (b *termBook) raise(db, uid string, terms map[int]int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	f, err := b.loadLocked(db, uid)
	if err != nil {
		return err
	}
	next := termFile{UID: uid, Terms: make(map[string]int64, len(f.Terms)+len(terms))}
	for s, t := range f.Terms {
		next.Terms[s] = t
	}
	changed := false
	for shard, t := range terms {
		if s := strconv.Itoa(shard); t > next.Terms[s] {
			next.Terms[s], changed = t, true
		}
	}
	if !changed {
		return nil
	}
	if b.dir != "" {
		raw, _ := json.Marshal(next)
		if err := atomicfile.Write(b.path(db), raw, 0o644); err != nil {
			return fmt.Errorf("persist seen terms of %s: %w", db, err)
		}
	}
	b.dbs[db] = &next
	return nil
}

// forget drops db's terms (the database was dropped and created again: the
// new incarnation's terms start over).
func (b *termBook) forget(db string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.dbs, db)
	delete(b.uids, db)
	if b.dir == "" {
		return nil
	}
	if err := os.Remove(b.path(db)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// snapshot gives the seen terms of the given replicas (shard ids), for the
// node record.
func (b *termBook) snapshot(ids []string) map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]int64, len(ids))
	for _, id := range ids {
		db, shard, err := models.ParseShardID(id)
		if err != nil {
			continue
		}
		if f, ok := b.dbs[db]; ok {
			if t := f.Terms[strconv.Itoa(shard)]; t > 0 {
				out[id] = t
			}
		}
	}
	return out
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%d bytes, over the %d byte bound", st.Size(), limit)
	}
	return os.ReadFile(path)
}

// replicaRole is a replica and the role the published state gives it.
type replicaRole struct {
	r *replica
	d desired
}

// admitTerms checks each replica's next role against the highest term it has
// accepted. A role at a higher term is recorded on disk first (one write per
// database); a role at a lower term is refused (ErrTermBehind): the replica
// stays idle until the master publishes the shard above its seen term, which
// it learns from the node record. A replica whose term could not be read or
// recorded stays idle too.
func (h *Host) admitTerms(st *statemachine.State, roles []replicaRole) []replicaRole {
	out := make([]replicaRole, 0, len(roles))
	raise := map[string]map[int]int64{}
	idle := func(rr replicaRole) replicaRole {
		return replicaRole{rr.r, desired{role: roleIdle, replicas: rr.d.replicas}}
	}
	for _, rr := range roles {
		r, d := rr.r, rr.d
		if d.role == roleIdle || d.term <= 0 {
			out = append(out, rr)
			continue
		}
		seen, err := h.terms.seen(r.db, st.Databases.At(r.db).UID, r.shard)
		switch {
		case err != nil:
			h.retry = true
			if r.refused != -1 {
				r.refused = -1
				r.lg.Error("cannot read the replica's seen term; not serving it", zap.Error(err))
			}
			out = append(out, idle(rr))
		case d.term < seen:
			if r.refused != d.term {
				r.refused = d.term
				r.lg.Warn("refusing a role at a term below one this replica already accepted; waiting for a newer term",
					zap.Error(fmt.Errorf("%w: shard %s published at term %d, seen %d", ErrTermBehind, r.id, d.term, seen)),
					zap.Int64("term", d.term), zap.Int64("seen_term", seen))
			}
			out = append(out, idle(rr))
		default:
			r.refused = 0
			if d.term > seen {
				if raise[r.db] == nil {
					raise[r.db] = map[int]int64{}
				}
				raise[r.db][r.shard] = d.term
			}
			out = append(out, rr)
		}
	}
	if len(raise) == 0 {
		return out
	}
	failed := map[string]bool{}
	for db, terms := range raise {
		if err := h.terms.raise(db, st.Databases.At(db).UID, terms); err != nil {
			h.lg.Error("cannot record the replicas' new terms; not acting at them", zap.String("db", db), zap.Error(err))
			failed[db] = true
			h.retry = true
		}
	}
	for i, rr := range out {
		if _, raised := raise[rr.r.db][rr.r.shard]; raised && failed[rr.r.db] {
			out[i] = idle(rr)
		}
	}
	return out
}
