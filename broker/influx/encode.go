package influx

import (
	"encoding/json"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cairn-db/cairn/broker/query"
)

type result struct {
	id   int
	rows []query.Row
	err  string
}

// encodeResults writes InfluxDB's answer without reflection, as chunks to
// send in order: a GROUP BY over thousands of series is millions of values,
// encoded in parallel parts that are sent as they are rather than copied
// into one buffer. unit is the epoch in ns; 0 writes times as RFC 3339
// strings.
func encodeResults(results []result, unit int64) [][]byte {
	var chunks [][]byte
	b := []byte(`{"results":[`)
	for i, r := range results {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"statement_id":`...)
		b = strconv.AppendInt(b, int64(r.id), 10)
		if r.err != "" {
			b = append(b, `,"error":`...)
			b = appendString(b, r.err)
		}
		if len(r.rows) > 0 {
			b = append(b, `,"series":[`...)
			for j, part := range encodeRows(r.rows, unit) {
				if j > 0 {
					b = append(b, ',')
				}
				if len(part) < 64<<10 {
					b = append(b, part...)
					continue
				}
				chunks = append(chunks, b, part)
				b = nil
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	return append(chunks, append(b, "]}\n"...))
}

// appendResults is encodeResults in one buffer.
func appendResults(b []byte, results []result, unit int64) []byte {
	for _, c := range encodeResults(results, unit) {
		b = append(b, c...)
	}
	return b
}

func appendRow(b []byte, row query.Row, unit int64) []byte {
	return appendRowTimes(b, row, unit, &timeTexts{})
}

// appendRowTimes is appendRow sharing time texts with the rows written before.
func appendRowTimes(b []byte, row query.Row, unit int64, tt *timeTexts) []byte {
	b = appendHead(b, &row)
	ck := clock{unit: unit, loc: row.Loc}
	if row.Times != nil {
		return append(appendCells(b, row, ck, tt), "]}"...)
	}
	timed := len(row.Columns) > 0 && row.Columns[0] == "time"
	for i, vals := range row.Values {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendValues(b, vals, timed, ck)
	}
	return append(b, "]}"...)
}

// appendValues writes one row of values; timed: the first is the time.
func appendValues(b []byte, vals []any, timed bool, ck clock) []byte {
	b = append(b, '[')
	for j, v := range vals {
		if j > 0 {
			b = append(b, ',')
		}
		if ts, ok := v.(int64); ok && j == 0 && timed {
			b = ck.append(b, ts)
			continue
		}
		b = appendValue(b, v)
	}
	return append(b, ']')
}

// appendHead writes a series' object up to its first value: name, tags
// and columns.
func appendHead(b []byte, row *query.Row) []byte {
	b = append(b, '{')
	if row.Name != "" {
		b = append(b, `"name":`...)
		b = appendString(b, row.Name)
		b = append(b, ',')
	}
	if len(row.Tags) > 0 {
		b = append(b, `"tags":{`...)
		for i, k := range slices.Sorted(maps.Keys(row.Tags)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, row.Tags[k])
		}
		b = append(b, "},"...)
	}
	b = append(b, `"columns":[`...)
	for i, c := range row.Columns {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, c)
	}
	return append(b, `],"values":[`...)
}

// timeTexts remembers the text of the times of the last row written by
// position: the rows of a GROUP BY time share one time grid, so each time is
// formatted once per statement rather than once per series.
type timeTexts struct {
	ts   []int64
	text [][]byte
	loc  *time.Location // of the texts
}

func (tt *timeTexts) append(b []byte, k int, ts int64, ck clock) []byte {
	if tt.loc != ck.loc {
		tt.ts, tt.text, tt.loc = tt.ts[:0], tt.text[:0], ck.loc
	}
	if k < len(tt.ts) && tt.ts[k] == ts {
		return append(b, tt.text[k]...)
	}
	start := len(b)
	b = ck.append(b, ts)
	for len(tt.ts) <= k {
		tt.ts, tt.text = append(tt.ts, 0), append(tt.text, nil)
	}
	tt.ts[k], tt.text[k] = ts, append(tt.text[k][:0], b[start:]...)
	return b
}

// appendCells writes the values of an aggregate row held unboxed.
func appendCells(b []byte, row query.Row, ck clock, tt *timeTexts) []byte {
	for k, ts := range row.Times {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = tt.append(b, k, ts, ck)
		for _, col := range row.Cells {
			b = append(b, ',')
			switch c := col[k]; c.Kind {
			case query.CellFloat:
				if math.IsNaN(c.F) || math.IsInf(c.F, 0) {
					b = append(b, "null"...)
				} else {
					b = appendFloat(b, c.F)
				}
			case query.CellInt:
				b = strconv.AppendInt(b, c.I, 10)
			case query.CellNull:
				b = append(b, "null"...)
			default:
				b = appendValue(b, c.Any())
			}
		}
		b = append(b, ']')
	}
	return b
}

// decimalPows are the scales appendFloat's fast path tries.
var decimalPows = [...]float64{1, 10, 100, 1000}

// appendFloat writes a finite f exactly as InfluxDB does (Go's
// encoding/json): the shortest decimal that reads back as f, without an
// exponent from 1e-6 up to 1e21, with one ("1e-07" cleaned to "1e-7")
// outside. Values under a million with at most three decimals (counters,
// percentages, means of them: most of what metrics hold) take a fast path:
// when i/10^s is the float nearest to f's decimal with s places, that
// decimal is the shortest text that reads back as f.
func appendFloat(b []byte, f float64) []byte {
	a := math.Abs(f)
	if a < 1e6 && (a >= 1e-3 || f == 0 && !math.Signbit(f)) {
		for scale, pow := range decimalPows {
			if i := math.Round(f * pow); i/pow == f {
				return appendDecimal(b, int64(i), scale)
			}
		}
	}
	if a == 0 || a >= 1e-6 && a < 1e21 {
		return strconv.AppendFloat(b, f, 'f', -1, 64)
	}
	start := len(b)
	b = strconv.AppendFloat(b, f, 'e', -1, 64)
	// e-07 -> e-7, as encoding/json writes it.
	if n := len(b) - start; n >= 4 && b[len(b)-4] == 'e' && b[len(b)-3] == '-' && b[len(b)-2] == '0' {
		b[len(b)-2] = b[len(b)-1]
		b = b[:len(b)-1]
	}
	return b
}

// appendDecimal writes i / 10^scale with scale decimals.
func appendDecimal(b []byte, i int64, scale int) []byte {
	if i < 0 {
		b = append(b, '-')
		i = -i
	}
	var digits [24]byte
	d := strconv.AppendInt(digits[:0], i, 10)
	if scale == 0 {
		return append(b, d...)
	}
	if pad := scale + 1 - len(d); pad > 0 {
		b = append(b, '0')
		b = append(b, '.')
		for range pad - 1 {
			b = append(b, '0')
		}
		return append(b, d...)
	}
	b = append(b, d[:len(d)-scale]...)
	b = append(b, '.')
	return append(b, d[len(d)-scale:]...)
}

// clock is how times are written: unit is the epoch in ns (0: RFC 3339
// strings, in loc, UTC when nil: a statement's tz()).
type clock struct {
	unit int64
	loc  *time.Location
}

func (ck clock) append(b []byte, ts int64) []byte {
	if ck.unit == 0 {
		t := time.Unix(0, ts).UTC()
		if ck.loc != nil {
			t = t.In(ck.loc)
		}
		b = append(b, '"')
		b = t.AppendFormat(b, time.RFC3339Nano)
		return append(b, '"')
	}
	return strconv.AppendInt(b, floorDiv(ts, ck.unit), 10)
}

// parallelRows is the number of value rows past which a statement's series
// are encoded by several goroutines: formatting millions of floats is most
// of a large GROUP BY's cost.
const parallelRows = 50_000

// appendRows writes rows, comma separated.
func appendRows(b []byte, rows []query.Row, unit int64) []byte {
	for j, part := range encodeRows(rows, unit) {
		if j > 0 {
			b = append(b, ',')
		}
		b = append(b, part...)
	}
	return b
}

// encodeRows encodes rows as parts to join with commas: one, or for a large
// result one contiguous part per CPU, encoded at once.
func encodeRows(rows []query.Row, unit int64) [][]byte {
	total := 0
	for i := range rows {
		total += rows[i].Len()
	}
	encode := func(rows []query.Row) []byte {
		out := make([]byte, 0, sizeOfRows(rows))
		var tt timeTexts
		for j, row := range rows {
			if j > 0 {
				out = append(out, ',')
			}
			out = appendRowTimes(out, row, unit, &tt)
		}
		return out
	}
	workers := min(runtime.GOMAXPROCS(0), len(rows))
	if total < parallelRows || workers < 2 {
		return [][]byte{encode(rows)}
	}
	parts := make([][]byte, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(rows)/workers, (w+1)*len(rows)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[w] = encode(rows[lo:hi])
		}()
	}
	wg.Wait()
	return parts
}

// sizeOfRows estimates the JSON of rows, to size its buffer once.
func sizeOfRows(rows []query.Row) int {
	n := 0
	for i := range rows {
		r := &rows[i]
		n += 64 + len(r.Name) + 16*len(r.Columns) + 24*len(r.Tags)
		if r.Times != nil {
			n += len(r.Times) * (18 + 12*len(r.Cells))
		} else {
			n += len(r.Values) * 16 * len(r.Columns)
		}
	}
	return n
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

func appendValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return append(b, "null"...)
		}
		return appendFloat(b, x)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case uint64:
		return strconv.AppendUint(b, x, 10)
	case string:
		return appendString(b, x)
	case bool:
		return strconv.AppendBool(b, x)
	}
	data, _ := json.Marshal(v)
	return append(b, data...)
}

func appendString(b []byte, s string) []byte {
	data, _ := json.Marshal(s) // strings always marshal
	return append(b, data...)
}
