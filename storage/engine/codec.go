package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/cairn-db/cairn/storage/lineproto"
)

// entryVersion leads every encoded entry so the format can evolve without
// misreading logs written by older binaries.
const entryVersion = 1

// ErrCorrupt means an encoded entry or undo record could not be decoded.
var ErrCorrupt = errors.New("engine: corrupt encoding")

// MarshalBinary encodes e compactly: varints, and a string table so that the
// metric, tag and field names repeated across a batch are written once. It is
// the on-disk log format and a suitable wire format for replication.
func (e Entry) MarshalBinary() ([]byte, error) {
	return e.appendBinary(make([]byte, 0, 64+len(e.Points)*24)), nil
}

func (e Entry) appendBinary(b []byte) []byte {
	return appendPointsEach(appendEntryHead(b, e.TxnID, e.Term), e.Points, nil)
}

// appendEntryHead appends what an encoded entry holds before its points.
func appendEntryHead(b []byte, txn, term uint64) []byte {
	b = append(b, entryVersion)
	b = binary.AppendUvarint(b, txn)
	return binary.AppendUvarint(b, term)
}

// appendPointsEach appends the points part of an encoded entry, calling
// each (when not nil) with the index of every point once it is encoded,
// while the point is in the caches (Prepare builds its series key there).
func appendPointsEach(b []byte, points []lineproto.Point, each func(i int)) []byte {
	b = binary.AppendUvarint(b, uint64(len(points)))
	table := getStringTable(len(points))
	defer putStringTable(table)
	// Consecutive points mostly repeat the metric, the field, the tag keys
	// and often values (the lines of one series, the tags the parser
	// interned): each position remembers its last string, and a repeat
	// skips the table's hashing. The bytes are the same either way.
	var last [16]struct {
		s   string
		ref uint64
	}
	str := func(slot int, s string) {
		if slot < len(last) && last[slot].ref != 0 && last[slot].s == s {
			b = binary.AppendUvarint(b, last[slot].ref)
			return
		}
		ref, ok := table[s]
		if ok {
			b = binary.AppendUvarint(b, ref)
		} else {
			ref = uint64(len(table) + 1)
			table[s] = ref
			b = append(b, 0)
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		if slot < len(last) {
			last[slot].s, last[slot].ref = s, ref
		}
	}
	for i := range points {
		p := &points[i]
		str(0, p.Metric)
		b = binary.AppendUvarint(b, uint64(len(p.Tags)))
		for j, t := range p.Tags {
			str(2+2*j, t.Key)
			str(3+2*j, t.Value)
		}
		str(1, p.Field)
		b = binary.AppendVarint(b, p.TS)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.Value))
		if each != nil {
			each(i)
		}
	}
	return b
}

// String tables are kept between encodings. An entry of a high-cardinality
// batch names a few new strings (tag values) for most of its points: a table
// sized for a quarter of them grew twice per entry, and the rehashing made
// the encoder's CPU per point rise with the number of series. A table reused
// from the pool has grown once; clearing it costs a pass over its slots,
// which is why one grown past tableKeep is not kept.
const tableKeep = 4096

var stringTables sync.Pool // of map[string]uint64, empty

func getStringTable(points int) map[string]uint64 {
	if t, ok := stringTables.Get().(map[string]uint64); ok {
		return t
	}
	return make(map[string]uint64, min(16+points/4, tableKeep))
}

func putStringTable(t map[string]uint64) {
	if len(t) > tableKeep {
		return
	}
	clear(t)
	stringTables.Put(t)
}

// UnmarshalBinary decodes what MarshalBinary produced. It never panics on bad
// input (entries may arrive over the network) and returns ErrCorrupt instead.
func (e *Entry) UnmarshalBinary(data []byte) error {
	d := decoder{b: data}
	if d.byte() != entryVersion {
		return fmt.Errorf("%w: unknown entry version", ErrCorrupt)
	}
	e.TxnID = d.uvarint()
	e.Term = d.uvarint()
	n := d.uvarint()
	// Each point takes at least 12 bytes, which bounds n before allocating.
	if d.err != nil || n > uint64(len(d.b))/12 {
		return fmt.Errorf("%w: bad entry header", ErrCorrupt)
	}
	e.Points = make([]lineproto.Point, n)
	var table []string
	str := func() string {
		ref := d.uvarint()
		if ref != 0 {
			if ref > uint64(len(table)) {
				d.fail()
				return ""
			}
			return table[ref-1]
		}
		s := string(d.bytes(d.uvarint()))
		table = append(table, s)
		return s
	}
	var tagBuf []lineproto.Tag // one backing array for the whole entry's tags
	for i := range e.Points {
		p := &e.Points[i]
		p.Metric = str()
		nt := d.uvarint()
		if nt > uint64(len(d.b)) {
			d.fail()
			break
		}
		if nt > 0 {
			start := len(tagBuf)
			for range nt {
				k := str()
				tagBuf = append(tagBuf, lineproto.Tag{Key: k, Value: str()})
			}
			p.Tags = tagBuf[start:len(tagBuf):len(tagBuf)]
		}
		p.Field = str()
		p.TS = d.varint()
		p.Value = math.Float64frombits(d.uint64())
		if d.err != nil {
			break
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return fmt.Errorf("%w: bad entry body", ErrCorrupt)
	}
	return nil
}

// undoOp records what one point write replaced, so a truncated entry can be
// rolled back exactly even when it overwrote an older entry's value.
type undoOp struct {
	point   int // index into the entry's points
	hadPrev bool
	prev    uint64 // float64 bits of the replaced value
}

func appendUndo(b []byte, op undoOp) []byte {
	b = binary.AppendUvarint(b, uint64(op.point))
	if !op.hadPrev {
		return append(b, 0)
	}
	b = append(b, 1)
	return binary.LittleEndian.AppendUint64(b, op.prev)
}

func decodeUndo(data []byte, npoints int) ([]undoOp, error) {
	d := decoder{b: data}
	var ops []undoOp
	for len(d.b) > 0 && d.err == nil {
		op := undoOp{point: int(d.uvarint())}
		op.hadPrev = d.byte() == 1
		if op.hadPrev {
			op.prev = d.uint64()
		}
		if op.point < 0 || op.point >= npoints {
			d.fail()
		}
		ops = append(ops, op)
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: bad undo record", ErrCorrupt)
	}
	return ops, nil
}

// decoder reads varints with a sticky error so call sites stay linear.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = ErrCorrupt
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uint64() uint64 {
	if len(d.b) < 8 {
		d.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) bytes(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

// u64Key encodes txn ids and meta values big-endian so bbolt orders them numerically.
func u64Key(v uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), v) }

// putTSKey writes ts big-endian with the sign bit flipped, so negative
// timestamps sort before positive ones and a time range is one cursor walk.
func putTSKey(dst []byte, ts int64) { binary.BigEndian.PutUint64(dst, uint64(ts)^(1<<63)) }

func tsFromKey(k []byte) int64 { return int64(binary.BigEndian.Uint64(k) ^ (1 << 63)) }
