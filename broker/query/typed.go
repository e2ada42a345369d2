package query

import (
	"encoding/binary"

	"github.com/cairn-db/cairn/models"
)

// The typed parts of a shard's answer (wire version 3): raw series of any
// field type, and how their values are written and read.

// NewRawSeries holds pts, a series' points of one type.
func NewRawSeries(tags []Tag, field string, pts []models.SeriesPoint) RawSeries {
	rs := RawSeries{Tags: tags, Field: field, TS: make([]int64, len(pts)), Values: make([]float64, len(pts))}
	if len(pts) > 0 {
		rs.Type = pts[0].Type
	}
	switch rs.Type {
	case models.FieldFloat:
	case models.FieldString:
		rs.Strs = make([]string, len(pts))
	default:
		rs.Ints = make([]int64, len(pts))
	}
	for i, p := range pts {
		rs.TS[i], rs.Values[i] = p.TS, p.Value
		if rs.Strs != nil {
			rs.Strs[i] = p.Str
		} else if rs.Ints != nil {
			rs.Ints[i] = p.Int
		}
	}
	return rs
}

// Point is point i.
func (s *RawSeries) Point(i int) models.SeriesPoint {
	p := models.SeriesPoint{TS: s.TS[i], Value: s.Values[i], Type: s.Type}
	switch {
	case s.Strs != nil:
		p.Str = s.Strs[i]
	case s.Ints != nil:
		p.Int = s.Ints[i]
	}
	return p
}

// typed says whether r holds anything but floats, which only the wire
// format's version 3 carries.
func (r *ShardResult) typed() bool {
	for _, g := range r.Groups {
		for _, f := range g.Fields {
			if f.Type != models.FieldFloat {
				return true
			}
		}
	}
	for _, s := range r.Raw {
		if s.Type != models.FieldFloat {
			return true
		}
	}
	return false
}

// appendRawValue appends raw point i of s in its type's encoding.
func appendRawValue(b []byte, s *RawSeries, i int) []byte {
	switch s.Type {
	case models.FieldInteger:
		return binary.AppendVarint(b, s.Ints[i])
	case models.FieldUnsigned:
		return binary.AppendUvarint(b, uint64(s.Ints[i]))
	case models.FieldBoolean:
		return append(b, byte(s.Ints[i]&1))
	case models.FieldString:
		return appendString(b, s.Strs[i])
	}
	return appendFloat(b, s.Values[i])
}

// rawValue reads raw point i of s, which has room for it.
func (d *decoder) rawValue(s *RawSeries, i int) {
	var sp models.SeriesPoint
	switch s.Type {
	case models.FieldFloat:
		s.Values[i] = d.float()
		return
	case models.FieldInteger:
		sp = models.TypedPoint(0, s.Type, uint64(d.Varint()), "")
	case models.FieldUnsigned:
		sp = models.TypedPoint(0, s.Type, d.Uvarint(), "")
	case models.FieldBoolean:
		v := d.Byte()
		if v > 1 {
			d.fail("boolean")
		}
		sp = models.TypedPoint(0, s.Type, uint64(v), "")
	case models.FieldString:
		s.Strs[i] = d.string()
		return
	}
	s.Values[i], s.Ints[i] = sp.Value, sp.Int
}

// fieldType reads a field type byte.
func (d *decoder) fieldType() models.FieldType {
	t := models.FieldType(d.Byte())
	if !t.Valid() {
		d.fail("field type")
	}
	return t
}

// firstLast reads a first or last value: a string of a string field, else
// a float.
func (d *decoder) firstLast(strs bool) (float64, string) {
	if strs {
		return 0, d.string()
	}
	return d.float(), ""
}
