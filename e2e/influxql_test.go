package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The known data set: a day of 10 s points from midnight dayStart, on
// cpu (hosts h0..h3, regions eu/us, fields value and idle; h1 silent from
// 06:00 to 07:00), mem (same hosts, field used) and disk (h0, paths / and
// /var, field free). Values are small integers, so sums and means are exact
// whatever order the shards add them in.
const dayStart = int64(1699920000) * 1e9 // 2023-11-14T00:00:00Z

type refPoint struct {
	m     string
	tags  map[string]string
	field string
	ts    int64
	v     float64
}

func influxDataset() ([]refPoint, []string) {
	var pts []refPoint
	var lines []string
	regions := []string{"eu", "eu", "us", "us"}
	for i := range 8640 {
		ts := dayStart + int64(i)*10e9
		for h := range 4 {
			host := fmt.Sprintf("h%d", h)
			tags := map[string]string{"host": host, "region": regions[h]}
			silent := h == 1 && ts >= dayStart+6*3600e9 && ts < dayStart+7*3600e9
			if !silent {
				value, idle := float64((i*7+h*13)%101), float64((i*3+h)%50)
				pts = append(pts, refPoint{"cpu", tags, "value", ts, value}, refPoint{"cpu", tags, "idle", ts, idle})
				lines = append(lines, fmt.Sprintf("cpu,host=%s,region=%s value=%v,idle=%v %d", host, regions[h], value, idle, ts))
			}
			used := float64((i*11 + h*5) % 997)
			pts = append(pts, refPoint{"mem", tags, "used", ts, used})
			lines = append(lines, fmt.Sprintf("mem,host=%s,region=%s used=%v %d", host, regions[h], used, ts))
		}
		for k, path := range []string{"/", "/var"} {
			free := float64((i + k*500) % 1000)
			pts = append(pts, refPoint{"disk", map[string]string{"host": "h0", "path": path}, "free", ts, free})
			lines = append(lines, fmt.Sprintf("disk,host=h0,path=%s free=%v %d", path, free, ts))
		}
	}
	return pts, lines
}

// refQuery is one aggregate query computed directly from the points.
type refQuery struct {
	m, field, fn string
	n            float64 // percentile
	keep         func(map[string]string) bool
	start, end   int64 // inclusive
	interval     int64
	offset       int64
	groupBy      []string
	fill         string // null, none, previous, linear or a number
}

// refSeries is one expected result series: tags key -> rows.
type refResult map[string][][]any

func tagsKey(tags map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		parts = append(parts, k+"="+tags[k])
	}
	return strings.Join(parts, ",")
}

func refAggregate(fn string, n float64, pts []refPoint) any {
	if len(pts) == 0 {
		return nil
	}
	vals := make([]float64, len(pts))
	sum := 0.0
	for i, p := range pts {
		vals[i] = p.v
		sum += p.v
	}
	sorted := slices.Clone(vals)
	slices.Sort(sorted)
	// first/last: the earliest/latest time; on a tie, the larger value.
	pick := func(better func(a, b refPoint) bool) float64 {
		best := pts[0]
		for _, p := range pts[1:] {
			if better(p, best) {
				best = p
			}
		}
		return best.v
	}
	switch fn {
	case "count":
		return int64(len(pts))
	case "sum":
		return sum
	case "mean":
		return sum / float64(len(pts))
	case "min":
		return sorted[0]
	case "max":
		return sorted[len(sorted)-1]
	case "spread":
		return sorted[len(sorted)-1] - sorted[0]
	case "first":
		return pick(func(a, b refPoint) bool { return a.ts < b.ts || a.ts == b.ts && a.v > b.v })
	case "last":
		return pick(func(a, b refPoint) bool { return a.ts > b.ts || a.ts == b.ts && a.v > b.v })
	case "median":
		if len(sorted)%2 == 1 {
			return sorted[len(sorted)/2]
		}
		return (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	case "percentile":
		i := int(math.Floor(float64(len(sorted))*n/100+0.5)) - 1
		if i < 0 || i >= len(sorted) {
			return nil
		}
		return sorted[i]
	case "stddev":
		if len(pts) < 2 {
			return nil
		}
		mean, ss := sum/float64(len(pts)), 0.0
		for _, v := range vals {
			ss += (v - mean) * (v - mean)
		}
		return math.Sqrt(ss / float64(len(pts)-1))
	}
	panic("unknown aggregate " + fn)
}

func (q refQuery) run(all []refPoint) refResult {
	groups := map[string]map[int64][]refPoint{}
	for _, p := range all {
		if p.m != q.m || p.field != q.field || p.ts < q.start || p.ts > q.end || (q.keep != nil && !q.keep(p.tags)) {
			continue
		}
		g := map[string]string{}
		for _, k := range q.groupBy {
			g[k] = p.tags[k]
		}
		key := tagsKey(g)
		if groups[key] == nil {
			groups[key] = map[int64][]refPoint{}
		}
		b := q.start
		if q.interval > 0 {
			b = (p.ts-q.offset)/q.interval*q.interval + q.offset // ts > 0 here
		}
		groups[key][b] = append(groups[key][b], p)
	}
	out := refResult{}
	for key, buckets := range groups {
		var rows [][]any
		if q.interval == 0 {
			// A lone selector reports its point's time, as InfluxDB does:
			// the earliest point holding the value, the latest for last.
			v, ts := refAggregate(q.fn, q.n, buckets[q.start]), q.start
			if slices.Contains([]string{"min", "max", "first", "last"}, q.fn) {
				found := false
				for _, p := range buckets[q.start] {
					if p.v == v && (!found || (q.fn == "last") == (p.ts > ts)) {
						ts, found = p.ts, true
					}
				}
			}
			out[key] = [][]any{{ts, v}}
			continue
		}
		first := (q.start-q.offset)/q.interval*q.interval + q.offset
		for t := first; t <= q.end; t += q.interval {
			v := refAggregate(q.fn, q.n, buckets[t])
			if v == nil && q.fill == "none" {
				continue
			}
			rows = append(rows, []any{t, v})
		}
		switch q.fill {
		case "null", "none":
			// count() reports 0 for an empty interval (InfluxDB's
			// functions page, COUNT() and fill()).
			for _, r := range rows {
				if r[1] == nil && q.fn == "count" {
					r[1] = int64(0)
				}
			}
		case "previous":
			var prev any
			for _, r := range rows {
				if r[1] == nil {
					r[1] = prev
				} else {
					prev = r[1]
				}
			}
		case "linear":
			for i := range rows {
				if rows[i][1] != nil {
					continue
				}
				lo, hi := i-1, i+1
				for hi < len(rows) && rows[hi][1] == nil {
					hi++
				}
				if lo < 0 || rows[lo][1] == nil || hi >= len(rows) {
					continue
				}
				x0, x1, x := float64(rows[lo][0].(int64)), float64(rows[hi][0].(int64)), float64(rows[i][0].(int64))
				y0, y1 := toF(rows[lo][1]), toF(rows[hi][1])
				rows[i][1] = y0 + (y1-y0)*(x-x0)/(x1-x0)
			}
		default:
			var n float64
			_, err := fmt.Sscan(q.fill, &n)
			if err != nil {
				panic(err)
			}
			for _, r := range rows {
				if r[1] == nil {
					r[1] = n
				}
			}
		}
		out[key] = rows
	}
	return out
}

func toF(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return math.NaN()
}

// requireResult compares one statement's series with the reference; times
// are compared in ms (epoch=ms), values within 1e-9 relative (stddev merges
// partial variances, so its last digits may differ from the two-pass one).
func requireResult(t *testing.T, label string, want refResult, got influxResponse, stmt int) {
	t.Helper()
	require.Empty(t, got.Results[stmt].Error, label)
	gotByKey := map[string][][]any{}
	for _, s := range got.Results[stmt].Series {
		gotByKey[tagsKey(s.Tags)] = s.Values
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(want)), slices.Collect(maps.Keys(gotByKey)), "%s: series", label)
	for key, rows := range want {
		g := gotByKey[key]
		require.Len(t, g, len(rows), "%s: rows of %q", label, key)
		for i, row := range rows {
			require.Equal(t, json.Number(fmt.Sprint(row[0].(int64)/1e6)), g[i][0], "%s: time of row %d of %q", label, i, key)
			if row[1] == nil {
				require.Nil(t, g[i][1], "%s: row %d of %q", label, i, key)
				continue
			}
			require.NotNil(t, g[i][1], "%s: row %d of %q: want %v", label, i, key, row[1])
			w, v := toF(row[1]), toF(g[i][1])
			require.InDelta(t, w, v, 1e-9*math.Max(1, math.Abs(w)), "%s: row %d of %q", label, i, key)
		}
	}
}

func writeLines(t *testing.T, addr, db string, lines []string) {
	t.Helper()
	for i := 0; i < len(lines); i += 5000 {
		body := strings.Join(lines[i:min(i+5000, len(lines))], "\n")
		resp, err := http.Post("http://"+addr+"/write?db="+db, "text/plain", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
}

// TestInfluxQLMatchesReference: every aggregate, every fill mode, tag
// filters, GROUP BY time (with offset) and tags, and Grafana's request
// shapes equal a reference computed here from the points, with the data in
// databases of 1, 8 and 32 shards (one answer per shard leader, merged by
// the broker).
func TestInfluxQLMatchesReference(t *testing.T) {
	pts, lines := influxDataset()
	dbs := map[string]int{"s1": 1, "s8": 8, "s32": 32}
	p := startInfluxStandalone(t, dbs)
	for db := range dbs {
		writeLines(t, p.addr, db, lines)
	}
	requireCases(t, p.addr, slices.Collect(maps.Keys(dbs)), influxQLCases(), pts)
	h := int64(3600e9)
	where := fmt.Sprintf("time >= %dms AND time < %dms", dayStart/1e6, (dayStart+12*h)/1e6)

	// The raw forms, LIMIT/SLIMIT and ORDER BY time DESC.
	code, res := influxQL(t, p.addr, "s8", fmt.Sprintf(`SELECT value, host FROM cpu WHERE host = 'h2' AND time >= %d AND time < %d;
		SELECT * FROM disk WHERE time >= %d AND time <= %d;
		SELECT mean(value) FROM cpu WHERE %s GROUP BY time(1h), host fill(none) LIMIT 2 SLIMIT 3;
		SELECT last(value) FROM cpu WHERE host = 'h0' AND %s GROUP BY time(6h) ORDER BY time DESC`,
		dayStart, dayStart+30e9, dayStart, dayStart+10e9, where, where), "s")
	require.Equal(t, 200, code, res.Error)
	n := func(v int64) json.Number { return json.Number(fmt.Sprint(v)) }
	require.Equal(t, []string{"time", "value", "host"}, res.Results[0].Series[0].Columns)
	require.Equal(t, [][]any{{n(dayStart / 1e9), n(26), "h2"}, {n(dayStart/1e9 + 10), n(33), "h2"}, {n(dayStart/1e9 + 20), n(40), "h2"}}, res.Results[0].Series[0].Values)
	require.Equal(t, []string{"time", "free", "host", "path"}, res.Results[1].Series[0].Columns)
	require.Equal(t, [][]any{{n(dayStart / 1e9), n(0), "h0", "/"}, {n(dayStart / 1e9), n(500), "h0", "/var"}, {n(dayStart/1e9 + 10), n(1), "h0", "/"}, {n(dayStart/1e9 + 10), n(501), "h0", "/var"}}, res.Results[1].Series[0].Values)
	require.Len(t, res.Results[2].Series, 3)
	for i, s := range res.Results[2].Series {
		require.Equal(t, fmt.Sprintf("h%d", i), s.Tags["host"])
		require.Len(t, s.Values, 2)
	}
	last := res.Results[3].Series[0].Values
	require.Len(t, last, 2)
	require.Equal(t, n((dayStart+6*h)/1e9), last[0][0])
	require.Equal(t, n(dayStart/1e9), last[1][0])

	// SHOW statements, as Grafana's query editor and template variables
	// issue them (public/app/plugins/datasource/influxdb query_builder's
	// buildExploreQuery).
	code, res = influxQL(t, p.addr, "s32", `SHOW DATABASES; SHOW MEASUREMENTS; SHOW MEASUREMENTS WITH MEASUREMENT =~ /^(cpu|disk)$/ LIMIT 100;
		SHOW TAG KEYS FROM "cpu"; SHOW TAG KEYS; SHOW TAG VALUES FROM "cpu" WITH KEY = "host" WHERE "region" = 'us';
		SHOW TAG VALUES WITH KEY IN ("path", "region"); SHOW TAG VALUES FROM "cpu" WITH KEY =~ /reg/; SHOW FIELD KEYS FROM "cpu";
		SHOW FIELD KEYS; SHOW SERIES FROM "disk"; SHOW RETENTION POLICIES ON "s32"; SHOW SERIES WHERE host = 'h3'`, "")
	require.Equal(t, 200, code, res.Error)
	col := func(i, s int) []string {
		var out []string
		for _, v := range res.Results[i].Series[s].Values {
			parts := make([]string, len(v))
			for j, x := range v {
				parts[j] = fmt.Sprint(x)
			}
			out = append(out, strings.Join(parts, "="))
		}
		return out
	}
	require.Equal(t, []string{"s1", "s32", "s8"}, col(0, 0))
	require.Equal(t, []string{"cpu", "disk", "mem", "warmup"}, col(1, 0))
	require.Equal(t, []string{"cpu", "disk"}, col(2, 0))
	require.Equal(t, "cpu", res.Results[3].Series[0].Name)
	require.Equal(t, []string{"host", "region"}, col(3, 0))
	require.Len(t, res.Results[4].Series, 3) // cpu, disk, mem: warmup has no tags
	require.Equal(t, []string{"host=h2", "host=h3"}, col(5, 0))
	require.Len(t, res.Results[6].Series, 3) // cpu, disk, mem
	require.Equal(t, "disk", res.Results[6].Series[1].Name)
	require.Equal(t, []string{"region=eu", "region=us"}, col(6, 0))
	require.Equal(t, []string{"path=/", "path=/var"}, col(6, 1))
	require.Equal(t, []string{"region=eu", "region=us"}, col(7, 0))
	require.Equal(t, []string{"idle=float", "value=float"}, col(8, 0))
	require.Len(t, res.Results[9].Series, 4)
	require.Equal(t, []string{`disk,host=h0,path=/`, `disk,host=h0,path=/var`}, col(10, 0))
	require.Equal(t, []string{"autogen=0s=168h0m0s=1=true"}, col(11, 0))
	require.Equal(t, []string{"cpu,host=h3,region=us", "mem,host=h3,region=us"}, col(12, 0))
}

// tc is one query of the reference set.
type tc struct {
	label string
	q     string
	ref   refQuery
}

// influxQLCases are the reference queries over the data set.
func influxQLCases() []tc {
	ms := func(ns int64) string { return fmt.Sprintf("%dms", ns/1e6) }
	h := int64(3600e9)
	from, to := dayStart, dayStart+12*h-1
	where := fmt.Sprintf("time >= %s AND time < %s", ms(from), ms(to+1))
	var cases []tc
	for _, fn := range []string{"mean", "sum", "count", "min", "max", "first", "last", "median", "percentile", "stddev", "spread"} {
		call, n := fn+"(value)", 0.0
		if fn == "percentile" {
			call, n = "percentile(value, 90)", 90
		}
		cases = append(cases, tc{fn + " by host",
			fmt.Sprintf("SELECT %s FROM cpu WHERE %s GROUP BY time(30m), host fill(null)", call, where),
			refQuery{m: "cpu", field: "value", fn: fn, n: n, start: from, end: to, interval: 1800e9, groupBy: []string{"host"}, fill: "null"}})
		cases = append(cases, tc{fn + " by region, 2 h, offset 15m",
			fmt.Sprintf("SELECT %s FROM cpu WHERE %s GROUP BY time(2h, 15m), region", call, where),
			refQuery{m: "cpu", field: "value", fn: fn, n: n, start: from, end: to, interval: 2 * h, offset: 15 * 60e9, groupBy: []string{"region"}, fill: "null"}})
		if fn == "percentile" {
			// Alone without GROUP BY time it reports its point's time,
			// which among equal values depends on InfluxDB's sort: the
			// differential suite checks that against InfluxDB itself.
			cases = append(cases, tc{fn + " whole range",
				fmt.Sprintf("SELECT %s FROM mem WHERE %s GROUP BY time(12h)", strings.Replace(call, "value", "used", 1), where),
				refQuery{m: "mem", field: "used", fn: fn, n: n, start: from, end: to, interval: 12 * h, fill: "null"}})
			continue
		}
		cases = append(cases, tc{fn + " whole range",
			fmt.Sprintf("SELECT %s FROM mem WHERE %s", strings.Replace(call, "value", "used", 1), where),
			refQuery{m: "mem", field: "used", fn: fn, n: n, start: from, end: to}})
	}
	h1 := func(tags map[string]string) bool { return tags["host"] == "h1" }
	for _, fill := range []string{"null", "none", "0", "-1.5", "previous", "linear"} {
		cases = append(cases, tc{"fill " + fill,
			fmt.Sprintf("SELECT mean(value) FROM cpu WHERE host = 'h1' AND %s GROUP BY time(20m) fill(%s)", where, fill),
			refQuery{m: "cpu", field: "value", fn: "mean", keep: h1, start: from, end: to, interval: 1200e9, fill: fill}})
		cases = append(cases, tc{"count fill " + fill,
			fmt.Sprintf("SELECT count(idle) FROM cpu WHERE host = 'h1' AND %s GROUP BY time(20m) fill(%s)", where, fill),
			refQuery{m: "cpu", field: "idle", fn: "count", keep: h1, start: from, end: to, interval: 1200e9, fill: fill}})
	}
	cases = append(cases,
		tc{"regex and !=", fmt.Sprintf(`SELECT max(idle) FROM cpu WHERE host =~ /^h[0-2]$/ AND region != 'us' AND %s GROUP BY time(1h), *`, where),
			refQuery{m: "cpu", field: "idle", fn: "max", keep: func(t map[string]string) bool { return t["host"] <= "h2" && t["region"] != "us" },
				start: from, end: to, interval: h, groupBy: []string{"host", "region"}, fill: "null"}},
		tc{"!~ and OR", fmt.Sprintf(`SELECT sum(used) FROM mem WHERE (host !~ /h3/ AND (region = 'us' OR host = 'h0')) AND %s GROUP BY time(3h)`, where),
			refQuery{m: "mem", field: "used", fn: "sum", keep: func(t map[string]string) bool { return t["host"] != "h3" && (t["region"] == "us" || t["host"] == "h0") },
				start: from, end: to, interval: 3 * h, fill: "null"}},
		tc{"disk by path", fmt.Sprintf(`SELECT last(free) FROM disk WHERE %s GROUP BY time(4h), path`, where),
			refQuery{m: "disk", field: "free", fn: "last", start: from, end: to, interval: 4 * h, groupBy: []string{"path"}, fill: "null"}},
	)
	// Grafana's InfluxDB datasource, time series panel, visual editor: the
	// backend renders $timeFilter as `time >= <from>ms and time <= <to>ms`
	// (grafana/grafana pkg/tsdb/influxdb/influxql, Query.renderTimeFilter),
	// a multi-value template variable $host as /^(h0|h2)$/, a tag filter as
	// ("host" =~ /^$host$/) before AND $timeFilter, $__interval as the
	// panel's interval, and GROUP BY time($__interval), "host" fill(null);
	// it asks for epoch=ms.
	gFrom, gTo := dayStart+3*h, dayStart+4*h
	cases = append(cases, tc{"grafana panel",
		fmt.Sprintf(`SELECT mean("value") FROM "cpu" WHERE ("host" =~ /^(h0|h2)$/) AND time >= %dms and time <= %dms GROUP BY time(10s), "host" fill(null)`, gFrom/1e6, gTo/1e6),
		refQuery{m: "cpu", field: "value", fn: "mean", keep: func(t map[string]string) bool { return t["host"] == "h0" || t["host"] == "h2" },
			start: gFrom, end: gTo, interval: 10e9, groupBy: []string{"host"}, fill: "null"}})
	cases = append(cases, tc{"grafana panel, policy and ::tag",
		fmt.Sprintf(`SELECT max("used") FROM "autogen"."mem" WHERE ("host"::tag = 'h3') AND time >= %dms and time <= %dms GROUP BY time(1m) fill(null)`, gFrom/1e6, gTo/1e6),
		refQuery{m: "mem", field: "used", fn: "max", keep: func(t map[string]string) bool { return t["host"] == "h3" },
			start: gFrom, end: gTo, interval: 60e9, fill: "null"}})

	return cases
}

// requireCases runs every case in one request per database and checks each
// answer against the reference.
func requireCases(t *testing.T, addr string, dbs []string, cases []tc, pts []refPoint) {
	t.Helper()
	// One request holding every statement (Grafana sends a panel's queries
	// joined by ';'), against each database.
	var qs []string
	for _, c := range cases {
		qs = append(qs, c.q)
	}
	answers := map[string]influxResponse{}
	for _, db := range dbs {
		code, res := influxQL(t, addr, db, strings.Join(qs, ";\n"), "ms")
		require.Equal(t, 200, code, "%s: %s", db, res.Error)
		require.Len(t, res.Results, len(cases))
		answers[db] = res
	}
	for i, c := range cases {
		want := c.ref.run(pts)
		require.NotEmpty(t, want, c.label)
		for _, db := range dbs {
			requireResult(t, db+" "+c.label, want, answers[db], i)
		}
	}
}

// TestInfluxQLReplicated: the same reference answers from a broker in front
// of three storage processes holding 8 shards at replica factor 3; the
// broker asks each shard's leader only.
func TestInfluxQLReplicated(t *testing.T) {
	pts, lines := influxDataset()
	c := startDataCluster(t, dataClusterOpts{storageNodes: 3, shards: 8, rf: 3})
	writeLines(t, c.broker.addr, c.db, lines)
	requireCases(t, c.broker.addr, []string{c.db}, influxQLCases(), pts)
	code, res := influxQL(t, c.broker.addr, c.db, "SHOW RETENTION POLICIES; SHOW MEASUREMENTS", "")
	require.Equal(t, 200, code)
	require.Equal(t, json.Number("3"), res.Results[0].Series[0].Values[0][3])
	require.Equal(t, [][]any{{"cpu"}, {"disk"}, {"mem"}}, res.Results[1].Series[0].Values)
}
