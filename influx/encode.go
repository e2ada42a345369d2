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

	"github.com/cairn-db/cairn/query"
)

type result struct {
	id   int
	rows []query.Row
	err  string
}

// appendResults writes InfluxDB's answer without reflection: a GROUP BY over
// thousands of series is millions of values. unit is the epoch in ns; 0
// writes times as RFC 3339 strings.
func appendResults(b []byte, results []result, unit int64) []byte {
	b = append(b, `{"results":[`...)
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
			b = appendRows(b, r.rows, unit)
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

func appendRow(b []byte, row query.Row, unit int64) []byte {
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
	b = append(b, `],"values":[`...)
	if row.Times != nil {
		return append(appendCells(b, row, unit), "]}"...)
	}
	timed := len(row.Columns) > 0 && row.Columns[0] == "time"
	for i, vals := range row.Values {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		for j, v := range vals {
			if j > 0 {
				b = append(b, ',')
			}
			if ts, ok := v.(int64); ok && j == 0 && timed {
				b = appendTime(b, ts, unit)
				continue
			}
			b = appendValue(b, v)
		}
		b = append(b, ']')
	}
	return append(b, "]}"...)
}

// appendCells writes the values of an aggregate row held unboxed.
func appendCells(b []byte, row query.Row, unit int64) []byte {
	for k, ts := range row.Times {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = appendTime(b, ts, unit)
		for _, col := range row.Cells {
			b = append(b, ',')
			switch c := col[k]; c.Kind {
			case query.CellFloat:
				if math.IsNaN(c.F) || math.IsInf(c.F, 0) {
					b = append(b, "null"...)
				} else {
					b = strconv.AppendFloat(b, c.F, 'g', -1, 64)
				}
			case query.CellInt:
				b = strconv.AppendInt(b, c.I, 10)
			default:
				b = append(b, "null"...)
			}
		}
		b = append(b, ']')
	}
	return b
}

func appendTime(b []byte, ts, unit int64) []byte {
	if unit == 0 {
		b = append(b, '"')
		b = time.Unix(0, ts).UTC().AppendFormat(b, time.RFC3339Nano)
		return append(b, '"')
	}
	return strconv.AppendInt(b, floorDiv(ts, unit), 10)
}

// parallelRows is the number of value rows past which a statement's series
// are encoded by several goroutines: formatting millions of floats is most
// of a large GROUP BY's cost.
const parallelRows = 50_000

// appendRows writes rows, comma separated; large results are split into one
// contiguous part per CPU, encoded at once and joined in order.
func appendRows(b []byte, rows []query.Row, unit int64) []byte {
	total := 0
	for i := range rows {
		total += rows[i].Len()
	}
	workers := min(runtime.GOMAXPROCS(0), len(rows))
	if total < parallelRows || workers < 2 {
		for j, row := range rows {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendRow(b, row, unit)
		}
		return b
	}
	parts := make([][]byte, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(rows)/workers, (w+1)*len(rows)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out []byte
			for j := lo; j < hi; j++ {
				if j > lo {
					out = append(out, ',')
				}
				out = appendRow(out, rows[j], unit)
			}
			parts[w] = out
		}()
	}
	wg.Wait()
	for w, part := range parts {
		if w > 0 && len(part) > 0 {
			b = append(b, ',')
		}
		b = append(b, part...)
	}
	return b
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
		return strconv.AppendFloat(b, x, 'g', -1, 64)
	case int64:
		return strconv.AppendInt(b, x, 10)
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
