package statemachine

import (
	"fmt"
	"strings"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
)

// Event is one decoded change from a source, or a control event.
type Event struct {
	Source  string
	Kind    Kind
	Cluster string
	Type    kv.WatchEventKind
	Name    string // key relative to the source prefix: db name, node id, "db/shard"...
	Value   any    // decoded record for puts
	Rev     int64
	// More: more events of Rev (or of a list) follow; the source's
	// revision advances only with the last (kv.WatchEvent.More).
	More bool
	// ClusterID is the etcd cluster a WatchSynced list came from.
	ClusterID uint64
	// Removed marks a control event: the source was removed, drop its keys.
	Removed bool
	// BackupLoaded marks the end of a replay of the local backup file.
	BackupLoaded bool
	// At is when the event was taken from etcd (unix milliseconds); it dates
	// departed storage nodes.
	At int64
	// Invalid is why a put's value did not decode or validate ("" when it
	// did): such a put only advances the source's revision and is listed in
	// State.Invalid.
	Invalid string

	raw *rawChange // the raw key, for the local backup
}

// decode turns a raw value into the record of kind k, tolerantly (unknown
// fields are ignored, missing ones defaulted) but validated. It runs on the
// watcher goroutine, so the consumer only moves pointers.
func decode(k Kind, name string, value []byte, createRev int64) (any, error) {
	spec, ok := k.spec()
	if !ok {
		return nil, fmt.Errorf("unknown record kind %d", int(k))
	}
	return spec.decode(name, value, createRev)
}

// apply is the reducer: it folds one event into the builder's state. It reads
// nothing but its arguments.
func (b *builder) apply(ev Event) {
	s := b.s
	if ev.BackupLoaded {
		s.FromBackup = true
		return
	}
	if ev.Removed {
		b.removeSource(ev)
		return
	}
	if ev.Type == kv.WatchSynced {
		cloneOnce(b, "synced", &s.Synced)[ev.Source] = true
		cloneOnce(b, "revisions", &s.Revisions)[ev.Source] = ev.Rev
		cloneOnce(b, "listed", &s.ListedFrom)[ev.Source] = ev.ClusterID
		return
	}
	if !ev.More && ev.Rev > s.Revisions[ev.Source] {
		cloneOnce(b, "revisions", &s.Revisions)[ev.Source] = ev.Rev
	}
	if ev.Invalid != "" || s.Invalid[ev.Source][ev.Name] != "" {
		inv := nested(b, "invalid", ev.Source, &s.Invalid)
		if ev.Invalid != "" {
			inv[ev.Name] = ev.Invalid
			return
		}
		delete(inv, ev.Name) // a good value or a delete replaced it
	}
	spec, ok := ev.Kind.spec()
	if !ok {
		return
	}
	del := ev.Type == kv.WatchDelete
	if spec.guarded {
		revs := cloneOnce(b, "modrevs", &s.ModRevs)
		if del {
			revs[ev.Source] = revs[ev.Source].del(b.tok, ev.Name)
		} else {
			revs[ev.Source] = revs[ev.Source].set(b.tok, ev.Name, ev.Rev)
		}
	}
	spec.reduce(b, ev, del)
}

func put[V any](m map[string]V, ev Event, del bool) {
	if del {
		delete(m, ev.Name)
		return
	}
	m[ev.Name] = ev.Value.(V)
}

func (b *builder) removeSource(ev Event) {
	s := b.s
	delete(cloneOnce(b, "synced", &s.Synced), ev.Source)
	delete(cloneOnce(b, "revisions", &s.Revisions), ev.Source)
	delete(cloneOnce(b, "modrevs", &s.ModRevs), ev.Source)
	delete(cloneOnce(b, "invalid", &s.Invalid), ev.Source)
	b.cloned["invalid/"+ev.Source] = false
	if spec, ok := ev.Kind.spec(); ok && spec.drop != nil {
		spec.drop(b, ev.Cluster)
	}
}

// depart keeps the last record of a storage node whose key is deleted, and
// forgets it when the node registers again.
func (b *builder) depart(ev Event, live Map[models.StorageNode], del bool) {
	s := b.s
	if !del {
		if _, ok := s.Departed[ev.Cluster][ev.Name]; ok {
			delete(nested(b, "departed", ev.Cluster, &s.Departed), ev.Name)
		}
		return
	}
	rec, ok := live.Get(ev.Name)
	if !ok {
		return
	}
	gone := nested(b, "departed", ev.Cluster, &s.Departed)
	if len(gone) >= MaxDeparted {
		oldest, at := "", int64(0)
		for id, d := range gone {
			if oldest == "" || d.Since < at || (d.Since == at && id < oldest) {
				oldest, at = id, d.Since
			}
		}
		delete(gone, oldest)
	}
	gone[ev.Name] = DepartedNode{Record: rec, Since: ev.At}
}

// nameOf is the part of key after prefix.
func nameOf(key, prefix string) string { return strings.TrimPrefix(key, prefix) }
