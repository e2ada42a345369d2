package influx

import (
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
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
			for j, row := range r.rows {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendRow(b, row, unit)
			}
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
				if unit == 0 {
					b = append(b, '"')
					b = time.Unix(0, ts).UTC().AppendFormat(b, time.RFC3339Nano)
					b = append(b, '"')
				} else {
					b = strconv.AppendInt(b, floorDiv(ts, unit), 10)
				}
				continue
			}
			b = appendValue(b, v)
		}
		b = append(b, ']')
	}
	return append(b, "]}"...)
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
