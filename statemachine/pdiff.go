package statemachine

import "math/bits"

// Changed calls changed with every key whose entry differs between two
// published snapshots of a Map: held by one only, or set again since (even
// to an equal value). Keys that share a slot of the trie with such a key
// may come too, and a key more than once. The subtrees the two share are
// skipped, so snapshots a few changes apart cost those changes, not the
// map's size.
func Changed[V any](old, cur Map[V], changed func(key string)) {
	pdiff(old.root, cur.root, changed)
}

func pdiff[V any](a, b *pnode[V], changed func(string)) {
	if a == b {
		return
	}
	if a == nil || b == nil {
		for _, n := range []*pnode[V]{a, b} {
			if n != nil {
				n.each(func(k string, _ V) bool { changed(k); return true })
			}
		}
		return
	}
	for all := a.bitmap | b.bitmap; all != 0; all &= all - 1 {
		bit := all & -all
		sa, sb := pslotAt(a, bit), pslotAt(b, bit)
		if sa != nil && sb != nil {
			if sa.child != nil && sb.child != nil {
				pdiff(sa.child, sb.child, changed)
				continue
			}
			if sa.leaf != nil && sa.leaf == sb.leaf {
				continue
			}
		}
		for _, s := range []*pslot[V]{sa, sb} {
			switch {
			case s == nil:
			case s.child != nil:
				s.child.each(func(k string, _ V) bool { changed(k); return true })
			default:
				changed(s.leaf.key)
				for _, p := range s.leaf.more {
					changed(p.key)
				}
			}
		}
	}
}

// pslotAt is n's slot for bit, or nil when n has none there.
func pslotAt[V any](n *pnode[V], bit uint32) *pslot[V] {
	if n.bitmap&bit == 0 {
		return nil
	}
	return &n.slots[bits.OnesCount32(n.bitmap&(bit-1))]
}
