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

// SeriesPoint is one sample; it marshals to JSON as [ts_ns, value].
type SeriesPoint struct {
	TS    int64
	Value float64
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
	if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendFloat(b, p.Value, 'g', -1, 64)
	}
	return append(b, ']')
}

// UnmarshalJSON reads [ts,value] (null reads as NaN), so brokers can relay
// results from storage nodes without loss.
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
	p.TS, p.Value = ts, math.NaN()
	if string(raw[1]) != "null" {
		if p.Value, err = strconv.ParseFloat(string(raw[1]), 64); err != nil {
			return fmt.Errorf("point value: %w", err)
		}
	}
	return nil
}
