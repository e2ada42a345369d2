package models

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// FieldTag is the pseudo-tag naming a series' field in query results and
// matches.
const FieldTag = "_field"

// DefaultField is the field name a shard's query answer does not report as
// a FieldTag.
const DefaultField = "value"

// SeriesPoint is one sample; it marshals to JSON as [ts_ns, value], the
// value in its type's JSON (a number, true/false or a string).
//
// Value is the sample as a number, whatever its type, for the aggregates
// that add numbers up: a float itself, an integer or unsigned converted
// (above 2^53 rounded), a boolean 1 or 0, a string 0. Int holds the exact
// value of the integer (int64), unsigned (uint64 bits) and boolean (1 or 0)
// types, Str a string's.
type SeriesPoint struct {
	TS    int64
	Value float64
	Int   int64
	Str   string
	Type  FieldType
}

// TypedPoint is the point at ts holding the exact value bits of type t
// (float64 bits for floats, the Int form otherwise) and, for strings, s.
func TypedPoint(ts int64, t FieldType, bits uint64, s string) SeriesPoint {
	p := SeriesPoint{TS: ts, Type: t}
	switch t {
	case FieldFloat:
		p.Value = math.Float64frombits(bits)
	case FieldUnsigned:
		p.Int, p.Value = int64(bits), float64(bits)
	case FieldString:
		p.Str = s
	default:
		p.Int, p.Value = int64(bits), float64(int64(bits))
	}
	return p
}

// Bits is the exact value as TypedPoint takes it (0 for strings).
func (p SeriesPoint) Bits() uint64 {
	switch p.Type {
	case FieldFloat:
		return math.Float64bits(p.Value)
	case FieldString:
		return 0
	}
	return uint64(p.Int)
}

// Any is the value as JSON answers carry it: float64, int64, uint64, bool
// or string.
func (p SeriesPoint) Any() any {
	switch p.Type {
	case FieldInteger:
		return p.Int
	case FieldUnsigned:
		return uint64(p.Int)
	case FieldBoolean:
		return p.Int != 0
	case FieldString:
		return p.Str
	}
	return p.Value
}

// MarshalJSON writes [ts,value]; a non-finite value, which JSON cannot carry, is
// written as null.
func (p SeriesPoint) MarshalJSON() ([]byte, error) {
	return p.AppendJSON(make([]byte, 0, 40)), nil
}

// AppendJSON appends the JSON MarshalJSON writes.
func (p SeriesPoint) AppendJSON(b []byte) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, p.TS, 10)
	b = append(b, ',')
	switch {
	case p.Type == FieldInteger:
		b = strconv.AppendInt(b, p.Int, 10)
	case p.Type == FieldUnsigned:
		b = strconv.AppendUint(b, uint64(p.Int), 10)
	case p.Type == FieldBoolean:
		b = strconv.AppendBool(b, p.Int != 0)
	case p.Type == FieldString:
		s, _ := json.Marshal(p.Str) // a string always marshals
		b = append(b, s...)
	case math.IsNaN(p.Value) || math.IsInf(p.Value, 0):
		b = append(b, "null"...)
	default:
		b = strconv.AppendFloat(b, p.Value, 'g', -1, 64)
	}
	return append(b, ']')
}

// UnmarshalJSON reads [ts,value] (null reads as NaN), so brokers can relay
// results from storage nodes without loss: a JSON string is a string, true
// and false booleans, a number a float.
func (p *SeriesPoint) UnmarshalJSON(data []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return fmt.Errorf("point: %w", err)
	}
	if len(raw) != 2 {
		return fmt.Errorf("point: want [ts,value], got %d elements", len(raw))
	}
	ts, err := strconv.ParseInt(string(raw[0]), 10, 64)
	if err != nil {
		return fmt.Errorf("point timestamp: %w", err)
	}
	*p = SeriesPoint{TS: ts, Value: math.NaN()}
	v := string(raw[1])
	switch {
	case v == "null":
	case v == "true" || v == "false":
		p.Type, p.Value = FieldBoolean, 0
		if v == "true" {
			p.Int, p.Value = 1, 1
		}
	case len(v) > 0 && v[0] == '"':
		p.Type, p.Value = FieldString, 0
		if err := json.Unmarshal(raw[1], &p.Str); err != nil {
			return fmt.Errorf("point value: %w", err)
		}
	default:
		if p.Value, err = strconv.ParseFloat(v, 64); err != nil {
			return fmt.Errorf("point value: %w", err)
		}
	}
	return nil
}
