package statemachine

import (
	"encoding/json"
	"hash/maphash"
	"iter"
	"maps"
	"math/bits"
	"slices"
)

// Map is an immutable map from string keys to V that snapshots share
// structurally (a hash array mapped trie): Set and Delete return a new Map
// that copies only the O(log32 n) nodes on the key's path, so one change to
// a state of 10,000 databases costs what it costs at 100, and every
// published snapshot stays valid for its readers. The zero Map is empty.
type Map[V any] struct {
	root *pnode[V]
	n    int
}

// pnode is one level of the trie: a 32-way node holding only the slots its
// bitmap marks.
type pnode[V any] struct {
	bitmap uint32
	owner  *ptoken // the batch that made it, which alone may change it in place
	slots  []pslot[V]
}

// ptoken marks the nodes made while applying one batch: until the batch's
// snapshot is published they are nobody else's, so further changes in the
// same batch edit them in place instead of copying again (a "transient").
// A token is never used after its batch. It is not empty: distinct tokens
// must have distinct addresses.
type ptoken struct{ _ byte }

// pslot is a subtree (child set) or an entry (leaf set), both by pointer
// so that copying a node on a change copies 32 small slots at most, not 32
// records.
type pslot[V any] struct {
	child *pnode[V]
	leaf  *pleaf[V]
}

// pleaf is one entry. Keys whose 64-bit hashes are equal (practically
// never) share an entry, the others in more.
type pleaf[V any] struct {
	owner *ptoken
	hash  uint64
	key   string
	val   V
	more  []pair[V]
}

type pair[V any] struct {
	key string
	val V
}

const (
	pbits = 5
	pmask = 1<<pbits - 1
)

var pseed = maphash.MakeSeed()

// phash hashes keys; tests swap it for weak hashes to reach collisions.
var phash = func(key string) uint64 { return maphash.String(pseed, key) }

// MapOf builds a Map holding the entries of m.
func MapOf[V any](m map[string]V) Map[V] {
	var out Map[V]
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = out.Set(k, m[k])
	}
	return out
}

// Len is the number of keys.
func (m Map[V]) Len() int { return m.n }

// Get returns the value of key and whether it is held.
func (m Map[V]) Get(key string) (V, bool) {
	var zero V
	n := m.root
	if n == nil {
		return zero, false
	}
	h := phash(key)
	for shift := uint(0); ; shift += pbits {
		bit := uint32(1) << ((h >> shift) & pmask)
		if n.bitmap&bit == 0 {
			return zero, false
		}
		s := &n.slots[bits.OnesCount32(n.bitmap&(bit-1))]
		if s.child != nil {
			n = s.child
			continue
		}
		l := s.leaf
		if l.hash != h {
			return zero, false
		}
		if l.key == key {
			return l.val, true
		}
		for _, p := range l.more {
			if p.key == key {
				return p.val, true
			}
		}
		return zero, false
	}
}

// At returns the value of key, or V's zero value when it is not held.
func (m Map[V]) At(key string) V {
	v, _ := m.Get(key)
	return v
}

// Has says whether key is held.
func (m Map[V]) Has(key string) bool {
	_, ok := m.Get(key)
	return ok
}

// Same says whether m and o are the same version of a map (one is the other,
// unchanged): a cheap test of "did anything change" between two snapshots.
// Maps built apart with equal contents are not the same.
func (m Map[V]) Same(o Map[V]) bool { return m.root == o.root && m.n == o.n }

// Set returns a Map where key holds val; m is unchanged.
func (m Map[V]) Set(key string, val V) Map[V] { return m.set(nil, key, val) }

// Delete returns a Map without key; m is unchanged.
func (m Map[V]) Delete(key string) Map[V] { return m.del(nil, key) }

// set is Set within a batch: nodes tok owns are changed in place, so m is
// no longer valid afterwards (only the result is).
func (m Map[V]) set(tok *ptoken, key string, val V) Map[V] {
	root := m.root
	if root == nil {
		root = &pnode[V]{owner: tok}
	}
	nr, added := root.set(tok, 0, phash(key), key, val)
	if added {
		return Map[V]{root: nr, n: m.n + 1}
	}
	return Map[V]{root: nr, n: m.n}
}

// del is Delete within a batch (see set).
func (m Map[V]) del(tok *ptoken, key string) Map[V] {
	if m.root == nil {
		return m
	}
	nr, removed := m.root.del(tok, 0, phash(key), key)
	if !removed {
		return m
	}
	if m.n == 1 {
		return Map[V]{}
	}
	return Map[V]{root: nr, n: m.n - 1}
}

// All yields every key and value, in no particular order (as a Go map).
func (m Map[V]) All() iter.Seq2[string, V] {
	return func(yield func(string, V) bool) {
		if m.root != nil {
			m.root.each(yield)
		}
	}
}

// Keys returns the keys, sorted.
func (m Map[V]) Keys() []string {
	out := make([]string, 0, m.n)
	for k := range m.All() {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ToMap copies the entries into a new Go map (callers that need one).
func (m Map[V]) ToMap() map[string]V {
	out := make(map[string]V, m.n)
	for k, v := range m.All() {
		out[k] = v
	}
	return out
}

// MarshalJSON writes the Map as a JSON object, like a Go map.
func (m Map[V]) MarshalJSON() ([]byte, error) { return json.Marshal(m.ToMap()) }

func (n *pnode[V]) each(yield func(string, V) bool) bool {
	for i := range n.slots {
		s := &n.slots[i]
		if s.child != nil {
			if !s.child.each(yield) {
				return false
			}
			continue
		}
		if !yield(s.leaf.key, s.leaf.val) {
			return false
		}
		for _, p := range s.leaf.more {
			if !yield(p.key, p.val) {
				return false
			}
		}
	}
	return true
}

// editable returns n itself when tok owns it (it was made during the
// current batch and is not published yet), else a copy that tok owns.
func (n *pnode[V]) editable(tok *ptoken) *pnode[V] {
	if tok != nil && n.owner == tok {
		return n
	}
	return &pnode[V]{bitmap: n.bitmap, owner: tok, slots: slices.Clone(n.slots)}
}

// set returns n with key holding val (n itself when tok owns it, else a
// copy), and whether the key is new.
func (n *pnode[V]) set(tok *ptoken, shift uint, h uint64, key string, val V) (*pnode[V], bool) {
	bit := uint32(1) << ((h >> shift) & pmask)
	pos := bits.OnesCount32(n.bitmap & (bit - 1))
	if n.bitmap&bit == 0 {
		leaf := pslot[V]{leaf: &pleaf[V]{owner: tok, hash: h, key: key, val: val}}
		if tok != nil && n.owner == tok {
			n.slots = slices.Insert(n.slots, pos, leaf)
			n.bitmap |= bit
			return n, true
		}
		c := &pnode[V]{bitmap: n.bitmap | bit, owner: tok, slots: make([]pslot[V], len(n.slots)+1)}
		copy(c.slots, n.slots[:pos])
		c.slots[pos] = leaf
		copy(c.slots[pos+1:], n.slots[pos:])
		return c, true
	}
	old := n.slots[pos]
	var ns pslot[V]
	added := false
	switch {
	case old.child != nil:
		child, a := old.child.set(tok, shift+pbits, h, key, val)
		ns, added = pslot[V]{child: child}, a
	case old.leaf.hash == h:
		var l *pleaf[V]
		l, added = old.leaf.withPair(tok, key, val)
		ns = pslot[V]{leaf: l}
	default:
		ns = pslot[V]{child: pjoin(tok, shift+pbits, old.leaf, &pleaf[V]{owner: tok, hash: h, key: key, val: val})}
		added = true
	}
	e := n.editable(tok)
	e.slots[pos] = ns
	return e, added
}

// withPair returns an entry of equal hashes with key set: l itself when tok
// owns it, else a copy.
func (l *pleaf[V]) withPair(tok *ptoken, key string, val V) (*pleaf[V], bool) {
	c := l
	if tok == nil || l.owner != tok {
		cp := *l
		cp.owner = tok
		cp.more = slices.Clone(l.more)
		c = &cp
	}
	if c.key == key {
		c.val = val
		return c, false
	}
	for i := range c.more {
		if c.more[i].key == key {
			c.more[i].val = val
			return c, false
		}
	}
	c.more = append(c.more, pair[V]{key, val})
	return c, true
}

// pjoin makes the subtree holding two entries of different hashes.
func pjoin[V any](tok *ptoken, shift uint, a, b *pleaf[V]) *pnode[V] {
	ia, ib := (a.hash>>shift)&pmask, (b.hash>>shift)&pmask
	if ia == ib {
		return &pnode[V]{bitmap: 1 << ia, owner: tok, slots: []pslot[V]{{child: pjoin(tok, shift+pbits, a, b)}}}
	}
	if ia > ib {
		a, b = b, a
		ia, ib = ib, ia
	}
	return &pnode[V]{bitmap: 1<<ia | 1<<ib, owner: tok, slots: []pslot[V]{{leaf: a}, {leaf: b}}}
}

// del returns n without key (nil when that leaves it empty; n itself when
// tok owns it, else a copy), and whether the key was there.
func (n *pnode[V]) del(tok *ptoken, shift uint, h uint64, key string) (*pnode[V], bool) {
	bit := uint32(1) << ((h >> shift) & pmask)
	if n.bitmap&bit == 0 {
		return n, false
	}
	pos := bits.OnesCount32(n.bitmap & (bit - 1))
	old := n.slots[pos]
	var ns pslot[V]
	keep := true
	switch {
	case old.child != nil:
		child, removed := old.child.del(tok, shift+pbits, h, key)
		if !removed {
			return n, false
		}
		switch {
		case child == nil:
			keep = false
		case len(child.slots) == 1 && child.slots[0].child == nil:
			ns = child.slots[0] // a lone entry moves up: the trie stays shallow
		default:
			ns = pslot[V]{child: child}
		}
	case old.leaf.hash != h:
		return n, false
	case old.leaf.key == key:
		l := old.leaf
		if len(l.more) == 0 {
			keep = false
		} else {
			ns = pslot[V]{leaf: &pleaf[V]{owner: tok, hash: h, key: l.more[0].key, val: l.more[0].val, more: slices.Clone(l.more[1:])}}
		}
	default:
		i := slices.IndexFunc(old.leaf.more, func(p pair[V]) bool { return p.key == key })
		if i < 0 {
			return n, false
		}
		c := *old.leaf
		c.owner = tok
		c.more = slices.Delete(slices.Clone(c.more), i, i+1)
		ns = pslot[V]{leaf: &c}
	}
	if !keep {
		if len(n.slots) == 1 {
			return nil, true
		}
		if tok != nil && n.owner == tok {
			n.slots = slices.Delete(n.slots, pos, pos+1)
			n.bitmap &^= bit
			return n, true
		}
		c := &pnode[V]{bitmap: n.bitmap &^ bit, owner: tok, slots: make([]pslot[V], 0, len(n.slots)-1)}
		c.slots = append(append(c.slots, n.slots[:pos]...), n.slots[pos+1:]...)
		return c, true
	}
	e := n.editable(tok)
	e.slots[pos] = ns
	return e, true
}

// NestedMapOf builds a Map of Maps (cluster -> name -> V) from Go maps.
func NestedMapOf[V any](m map[string]map[string]V) Map[Map[V]] {
	var out Map[Map[V]]
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = out.Set(k, MapOf(m[k]))
	}
	return out
}

// SetIn returns m with inner key k of outer key o set to v.
func SetIn[V any](m Map[Map[V]], o, k string, v V) Map[Map[V]] {
	return m.Set(o, m.At(o).Set(k, v))
}

// DeleteIn returns m without inner key k of outer key o.
func DeleteIn[V any](m Map[Map[V]], o, k string) Map[Map[V]] {
	in, ok := m.Get(o)
	if !ok || !in.Has(k) {
		return m
	}
	return m.Set(o, in.Delete(k))
}
