// Package wire is the encoding of a replicated entry: what the engine's logs
// hold and what storage nodes send each other. It sits below both the engine
// and the storage client, so the client (and the broker through it) encodes
// a write without linking the engine.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
)

// An entry's first byte is its format version, so the format can evolve
// without misreading logs written by older binaries. Version 1 holds float
// values only (every value an 8-byte float64); version 2 adds each point's
// field type (models.FieldType, one byte) before its value: a float as in
// version 1, an integer as a varint, an unsigned as a uvarint, a boolean as
// one byte 0 or 1, a string as a uvarint length and its bytes. An entry
// whose points are all floats is written as version 1, byte for byte what
// release 0.1.0 writes, so a node of that release (protocol 2) reads it;
// only an entry holding another type needs a reader of protocol 3.
// Version 3 is a delete (delete.go).
const (
	entryV1 = 1
	entryV2 = 2
)

// Version is the format version an entry of points is written in: 1 when
// every point is a float, else 2.
func Version(points []lineproto.Point) byte {
	for i := range points {
		if points[i].Type != models.FieldFloat {
			return entryV2
		}
	}
	return entryV1
}

// ErrCorrupt means an encoded entry (or another record read with a
// Decoder) could not be decoded.
var ErrCorrupt = errors.New("corrupt encoding")

// ErrBadDelete means a delete that cannot be applied (Delete.Validate).
var ErrBadDelete = errors.New("bad delete")

// Entry is one replicated batch as it is logged and sent. Point tags are
// sorted by key, as lineproto.Parse returns them.
type Entry struct {
	TxnID  uint64
	Term   uint64
	Points []lineproto.Point
	// Delete, when not nil, makes the entry a delete (version 3): it
	// holds no points.
	Delete *Delete
}

// MarshalBinary encodes e compactly: varints, and a string table so that the
// metric, tag and field names repeated across a batch are written once.
func (e Entry) MarshalBinary() ([]byte, error) {
	if e.Delete != nil {
		if len(e.Points) > 0 {
			return nil, fmt.Errorf("%w: a delete entry holds points", ErrBadDelete)
		}
		if err := e.Delete.Validate(); err != nil {
			return nil, err
		}
		return AppendDeleteEntry(nil, e.TxnID, e.Term, e.Delete), nil
	}
	return AppendPoints(AppendHead(make([]byte, 0, 64+len(e.Points)*24), e.TxnID, e.Term, Version(e.Points)), e.Points, nil), nil
}

// AppendHead appends what an encoded entry holds before its points;
// version must be Version of the points AppendPoints appends after it.
func AppendHead(b []byte, txn, term uint64, version byte) []byte {
	b = append(b, version)
	b = binary.AppendUvarint(b, txn)
	return binary.AppendUvarint(b, term)
}

// AppendPoints appends the points part of an encoded entry (in the format
// of Version(points)), calling each
// (when not nil) with the index of every point once it is encoded, while the
// point is in the caches (the engine's Prepare builds its series key there).
func AppendPoints(b []byte, points []lineproto.Point, each func(i int)) []byte {
	typed := Version(points) == entryV2
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
		if typed {
			b = appendTyped(b, p)
		} else {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.Value))
		}
		if each != nil {
			each(i)
		}
	}
	return b
}

// appendTyped appends a version 2 point's type and value.
func appendTyped(b []byte, p *lineproto.Point) []byte {
	b = append(b, byte(p.Type))
	switch p.Type {
	case models.FieldInteger:
		return binary.AppendVarint(b, p.Int)
	case models.FieldUnsigned:
		return binary.AppendUvarint(b, uint64(p.Int))
	case models.FieldBoolean:
		return append(b, byte(p.Int&1))
	case models.FieldString:
		b = binary.AppendUvarint(b, uint64(len(p.Str)))
		return append(b, p.Str...)
	}
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(p.Value))
}

// readTyped reads a version 2 point's type and value into p.
func readTyped(d *Decoder, p *lineproto.Point) {
	t := models.FieldType(d.Byte())
	switch t {
	case models.FieldFloat:
		p.Value = math.Float64frombits(d.Uint64())
		return
	case models.FieldInteger:
		p.SetBits(t, uint64(d.Varint()), "")
	case models.FieldUnsigned:
		p.SetBits(t, d.Uvarint(), "")
	case models.FieldBoolean:
		v := d.Byte()
		if v > 1 {
			d.Fail()
		}
		p.SetBits(t, uint64(v), "")
	case models.FieldString:
		p.SetBits(t, 0, string(d.Bytes(d.Uvarint())))
	default:
		d.Fail()
	}
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
// input (entries arrive over the network) and returns ErrCorrupt instead.
func (e *Entry) UnmarshalBinary(data []byte) error {
	d := NewDecoder(data)
	version := d.Byte()
	if version != entryV1 && version != entryV2 && version != entryV3 {
		return fmt.Errorf("%w: unknown entry version %d", ErrCorrupt, version)
	}
	e.TxnID = d.Uvarint()
	e.Term = d.Uvarint()
	e.Points, e.Delete = nil, nil
	if version == entryV3 {
		var err error
		e.Delete, err = readDelete(&d)
		return err
	}
	n := d.Uvarint()
	// Each point takes at least 12 bytes (6 in version 2), which bounds n
	// before allocating.
	minPoint := uint64(12)
	if version == entryV2 {
		minPoint = 6
	}
	if d.err != nil || n > uint64(len(d.b))/minPoint {
		return fmt.Errorf("%w: bad entry header", ErrCorrupt)
	}
	e.Points = make([]lineproto.Point, n)
	var table []string
	str := func() string {
		ref := d.Uvarint()
		if ref != 0 {
			if ref > uint64(len(table)) {
				d.Fail()
				return ""
			}
			return table[ref-1]
		}
		s := string(d.Bytes(d.Uvarint()))
		table = append(table, s)
		return s
	}
	var tagBuf []lineproto.Tag // one backing array for the whole entry's tags
	for i := range e.Points {
		p := &e.Points[i]
		p.Metric = str()
		nt := d.Uvarint()
		if nt > uint64(len(d.b)) {
			d.Fail()
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
		p.TS = d.Varint()
		if version == entryV2 {
			readTyped(&d, p)
		} else {
			p.Value = math.Float64frombits(d.Uint64())
		}
		if d.err != nil {
			break
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return fmt.Errorf("%w: bad entry body", ErrCorrupt)
	}
	return nil
}
