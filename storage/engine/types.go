package engine

import (
	"encoding/binary"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	bolt "go.etcd.io/bbolt"
)

// Field types and strings (see doc.go, "Field types"):
//
//	ftype   lp(metric) lp(field) -> type byte: the type of every field the
//	                              shard has flushed; a field named by a
//	                              posting but not here is a float (files of
//	                              the releases that stored floats only)
//	strs    string id (u64 BE)   -> the string's bytes: the values of string
//	                              series, whose blocks hold the ids
var (
	bucketFTypes = []byte("ftype")
	bucketStrs   = []byte("strs")
)

// ErrFieldTypeConflict is a point whose field already holds another type in
// the shard (InfluxDB's "field type conflict"); it is refused, the other
// points of its batch are stored.
var ErrFieldTypeConflict = fmt.Errorf("%w: field type conflict", models.ErrBadInput)

// fieldTypes is a shard's type per (metric, field): loaded at open, claimed
// by the first point of a new field that the leader admits (check) or a
// memtable takes (claim), and saved by the flush that writes them.
type fieldTypes struct {
	// mu is read-locked by the checks of every write to the shard, which
	// find their fields known nearly always: a field is claimed once.
	mu      sync.RWMutex
	m       map[string]map[string]models.FieldType // metric -> field -> type
	unsaved [][2]string                            // claimed since the last save
}

func (ft *fieldTypes) getLocked(metric, field string) (models.FieldType, bool) {
	t, ok := ft.m[metric][field]
	return t, ok
}

func (ft *fieldTypes) setLocked(metric, field string, t models.FieldType) {
	if ft.m == nil {
		ft.m = make(map[string]map[string]models.FieldType)
	}
	// Clone: the names may point into a whole request body, which is
	// reused once its write has ended (broker/influx.ReleaseBody).
	metric, field = strings.Clone(metric), strings.Clone(field)
	fields := ft.m[metric]
	if fields == nil {
		fields = make(map[string]models.FieldType)
		ft.m[metric] = fields
	}
	fields[field] = t
	ft.unsaved = append(ft.unsaved, [2]string{metric, field})
}

// claim records t as the type of (metric, field) unless it has one.
func (ft *fieldTypes) claim(metric, field string, t models.FieldType) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	if _, ok := ft.getLocked(metric, field); !ok {
		ft.setLocked(metric, field, t)
	}
}

// typeOf is the type of (metric, field), if the shard has it.
func (ft *fieldTypes) typeOf(metric, field string) (models.FieldType, bool) {
	ft.mu.RLock()
	defer ft.mu.RUnlock()
	return ft.getLocked(metric, field)
}

// Conflict is a point refused for its field's type: what check returns per
// refused point, worded as InfluxDB words it.
type Conflict struct {
	Metric, Field string
	Type, Has     models.FieldType
}

// Unwrap makes it an ErrFieldTypeConflict.
func (c *Conflict) Unwrap() error { return ErrFieldTypeConflict }

func (c *Conflict) Error() string {
	return fmt.Sprintf("field type conflict: input field %q on measurement %q is type %s, already exists as type %s",
		c.Field, c.Metric, c.Type, c.Has)
}

// check admits points whose field is new to the shard (claiming its type)
// or of the type the shard holds, and returns them in order (points itself
// when all are admitted), with how many it refused and the first refusal.
func (ft *fieldTypes) check(points []lineproto.Point) ([]lineproto.Point, int, *Conflict) {
	// Shared first: the writers of a shard all check each batch, and with
	// the lock held exclusively for a batch's points they queued on it.
	ft.mu.RLock()
	known := ft.allKnownLocked(points)
	ft.mu.RUnlock()
	if known {
		return points, 0, nil
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	var kept []lineproto.Point
	var first *Conflict
	refused := 0
	var c fieldCursor
	for i := range points {
		p := &points[i]
		t, ok := c.typeOf(ft.m, p)
		switch {
		case !ok:
			ft.setLocked(p.Metric, p.Field, p.Type)
		case t != p.Type:
			if refused == 0 {
				kept = append(make([]lineproto.Point, 0, len(points)), points[:i]...)
				first = &Conflict{Metric: p.Metric, Field: p.Field, Type: p.Type, Has: t}
			}
			refused++
			continue
		}
		if refused > 0 {
			kept = append(kept, *p)
		}
	}
	if refused == 0 {
		return points, 0, nil
	}
	return kept, refused, first
}

// allKnownLocked says whether every point's field is known with the
// point's type. The caller holds mu, shared at least.
func (ft *fieldTypes) allKnownLocked(points []lineproto.Point) bool {
	var c fieldCursor
	for i := range points {
		if t, ok := c.typeOf(ft.m, &points[i]); !ok || t != points[i].Type {
			return false
		}
	}
	return true
}

// fieldCursor looks up the types of a batch's fields in order: one look-up
// of the metric per run of points that share it (a line's fields), one of
// the field per point unless it is the field the point before found (a
// batch of one field looked its type up for every point: 1 % of a write's
// CPU at +160k series, issue 21).
type fieldCursor struct {
	metric string
	fields map[string]models.FieldType
	// field was found in fields with type typ.
	field string
	typ   models.FieldType
}

func (c *fieldCursor) typeOf(m map[string]map[string]models.FieldType, p *lineproto.Point) (models.FieldType, bool) {
	if c.fields != nil && p.Metric == c.metric && p.Field == c.field {
		return c.typ, true
	}
	if c.fields == nil || p.Metric != c.metric {
		c.metric, c.fields = p.Metric, m[p.Metric]
	}
	t, ok := c.fields[p.Field]
	if !ok {
		c.fields = nil // a claim (setLocked) may create the metric's map
		return t, false
	}
	c.field, c.typ = p.Field, t
	return t, true
}

// AdmitTypes is Shard's.
func (s *boltShard) AdmitTypes(points []lineproto.Point) ([]lineproto.Point, int, error) {
	kept, refused, first := s.ixNow().ft.check(points)
	if first == nil {
		return kept, 0, nil
	}
	return kept, refused, first
}

// FieldTypes is Shard's.
func (s *boltShard) FieldTypes(metric string) map[string]models.FieldType {
	ft := &s.ixNow().ft
	ft.mu.RLock()
	defer ft.mu.RUnlock()
	return maps.Clone(ft.m[metric])
}

// save writes the types claimed since the last save; a type claimed by a
// point that never flushes is saved all the same, as InfluxDB keeps a
// field it created.
func (ft *fieldTypes) save(tx *bolt.Tx) error {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	b := tx.Bucket(bucketFTypes)
	for _, mf := range ft.unsaved {
		t, _ := ft.getLocked(mf[0], mf[1])
		if err := b.Put(ftypeKey(mf[0], mf[1]), []byte{byte(t)}); err != nil {
			return err
		}
	}
	ft.unsaved = ft.unsaved[:0]
	return nil
}

func ftypeKey(metric, field string) []byte { return appendLP(appendLP(nil, metric), field) }

// cutLP reads one length-prefixed string off b.
func cutLP(b []byte) (string, []byte, bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return "", nil, false
	}
	return string(b[k : k+int(n)]), b[k+int(n):], true
}

// loadTypes reads the shard's field types: the saved ones, then every
// field the postings name that has none, a float (the only type files
// without the bucket hold).
func loadTypes(tx *bolt.Tx, ft *fieldTypes) error {
	ft.m = make(map[string]map[string]models.FieldType)
	if b := tx.Bucket(bucketFTypes); b != nil {
		err := b.ForEach(func(k, v []byte) error {
			metric, rest, ok := cutLP(k)
			field, rest2, ok2 := cutLP(rest)
			if !ok || !ok2 || len(rest2) != 0 || len(v) != 1 || !models.FieldType(v[0]).Valid() {
				return fmt.Errorf("%w: field type record %x", ErrCorrupt, k)
			}
			if ft.m[metric] == nil {
				ft.m[metric] = make(map[string]models.FieldType)
			}
			ft.m[metric][field] = models.FieldType(v[0])
			return nil
		})
		if err != nil {
			return err
		}
	}
	post := tx.Bucket(bucketPost)
	if post == nil {
		return nil
	}
	c := post.Cursor()
	prefix := []byte{postField}
	for k, _ := c.Seek(prefix); k != nil && k[0] == postField; k, _ = c.Next() {
		metric, rest, ok := cutLP(k[1:])
		field, _, ok2 := cutLP(rest)
		if !ok || !ok2 {
			return fmt.Errorf("%w: field posting %x", ErrCorrupt, k)
		}
		if _, ok := ft.m[metric][field]; !ok {
			if ft.m[metric] == nil {
				ft.m[metric] = make(map[string]models.FieldType)
			}
			ft.m[metric][field] = models.FieldFloat
		}
	}
	return nil
}

// loadNextStr is the id the shard's next string gets: one past the last
// saved.
func loadNextStr(tx *bolt.Tx) uint64 {
	b := tx.Bucket(bucketStrs)
	if b == nil {
		return 1
	}
	k, _ := b.Cursor().Last()
	if len(k) != 8 {
		return 1
	}
	return beUint64(k) + 1
}

// strView is a memtable's strings: ids base, base+1, ... (a memtable's
// string ids are consecutive: only the active memtable takes points, under
// the shard's write mutex, and it alone draws ids).
type strView struct {
	base uint64
	strs []string
}

func (v strView) get(id uint64) (string, bool) {
	if id < v.base || id-v.base >= uint64(len(v.strs)) {
		return "", false
	}
	return v.strs[id-v.base], true
}

// strings resolves string ids: the memtables' first, then the shard's strs
// bucket.
type strResolver struct {
	mems   []strView
	bucket *bolt.Bucket
}

func (r *strResolver) get(id uint64) (string, error) {
	for _, v := range r.mems {
		if s, ok := v.get(id); ok {
			return s, nil
		}
	}
	if r.bucket != nil {
		if v := r.bucket.Get(u64Key(id)); v != nil {
			return string(v), nil
		}
	}
	return "", fmt.Errorf("%w: string %d not found", ErrCorrupt, id)
}

// point is the SeriesPoint of a stored point of type t.
func (r *strResolver) point(p memPoint, t models.FieldType) (SeriesPoint, error) {
	if t != models.FieldString {
		return models.TypedPoint(p.ts, t, p.bits, ""), nil
	}
	s, err := r.get(p.bits)
	return models.TypedPoint(p.ts, t, 0, s), err
}

// saveStrs writes a flushed memtable's strings.
func saveStrs(tx *bolt.Tx, mt *memtable) error {
	if len(mt.strs) == 0 {
		return nil
	}
	b := tx.Bucket(bucketStrs)
	b.FillPercent = 1 // ids only grow: pages packed full
	for i, s := range mt.strs {
		if err := b.Put(u64Key(mt.strBase+uint64(i)), []byte(s)); err != nil {
			return err
		}
	}
	return nil
}

// ixNow is the shard's series index, which a restore or recovery replaces
// under mu.
func (s *boltShard) ixNow() *seriesIndex {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.ix
}
