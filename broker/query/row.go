package query

import "time"

// Row is one result series of a statement, in InfluxDB's shape. Values hold
// the time (unix ns, int64) first, then float64, int64 (count), string (raw
// tag columns) or nil. Aggregate rows carry their values unboxed instead, in
// Times and one Cells column per output after time, and leave Values nil: a
// GROUP BY time over thousands of groups is millions of values.
type Row struct {
	Name    string
	Tags    map[string]string
	Columns []string
	Values  [][]any
	Times   []int64
	Cells   [][]Cell
	// Loc is the time zone its times are written in (tz()); nil: UTC.
	Loc *time.Location
}

// Len is the number of value rows.
func (r *Row) Len() int {
	if r.Values != nil {
		return len(r.Values)
	}
	return len(r.Times)
}

// AnyValues is the row's values as Values holds them, boxing the unboxed
// form.
func (r *Row) AnyValues() [][]any {
	if r.Values != nil || r.Times == nil {
		return r.Values
	}
	out := make([][]any, len(r.Times))
	for k, t := range r.Times {
		v := make([]any, len(r.Cells)+1)
		v[0] = t
		for i, col := range r.Cells {
			v[i+1] = col[k].Any()
		}
		out[k] = v
	}
	return out
}

// CellKind says what a Cell holds.
type CellKind uint8

// The kinds of Cell.
const (
	CellNull CellKind = iota
	CellFloat
	CellInt
	CellUint   // I holds the uint64's bits
	CellBool   // I is 1 or 0
	CellString // S
)

// Cell is one aggregate value: null, a float, an integer (count, or an
// integer field's sum, min, ...), an unsigned, a boolean or a string (an
// aggregate that picks one value of such a field).
type Cell struct {
	Kind CellKind
	F    float64
	I    int64
	S    string
}

// Any is the cell as Values would hold it: nil, float64, int64, uint64,
// bool or string.
func (c Cell) Any() any {
	switch c.Kind {
	case CellFloat:
		return c.F
	case CellInt:
		return c.I
	case CellUint:
		return uint64(c.I)
	case CellBool:
		return c.I != 0
	case CellString:
		return c.S
	}
	return nil
}

func floatCell(f float64) Cell { return Cell{Kind: CellFloat, F: f} }

func (c Cell) float() float64 {
	switch c.Kind {
	case CellInt, CellBool:
		return float64(c.I)
	case CellUint:
		return float64(uint64(c.I))
	}
	return c.F
}
