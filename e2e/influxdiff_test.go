package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The differential suite: the same data in a reference InfluxDB 1.x and in
// Cairn, the same InfluxQL against both, and the answers must be the same
// bytes. Where Cairn differs on purpose, the case names a documented
// exception (diffExceptions) that says why and how the answers are
// normalised before the comparison; nothing else is normalised.

// diffException is one documented difference from InfluxDB 1.x.
type diffException struct {
	why string
	// normalise rewrites both answers before they are compared; nil when
	// the answers are compared as they are but only the statuses must
	// match (the difference is in the body's wording).
	normalise func(ref, got string) (string, string)
}

// tieValues matches a [time,value] row's value.
var tieValues = regexp.MustCompile(`(\["[^"]+",)[-0-9.e]+\]`)

var diffExceptions = map[string]diffException{
	"stop-at-first-error": {
		why: "InfluxDB stops at a request's first failing statement and answers it, and the rest, \"not executed\" " +
			"(1.x even drops the last statement's result); Cairn runs every statement and answers each its own " +
			"result or error, so a dashboard panel's one bad query does not blank the others. Compared: the statements before the first error.",
		normalise: func(ref, got string) (string, string) {
			cut := func(s string) string {
				if i := strings.Index(s, `{"statement_id":`); i >= 0 {
					if j := strings.Index(s[i:], `"error"`); j >= 0 {
						return s[:i+j]
					}
				}
				return s
			}
			return cut(ref), cut(got)
		},
	},
	"selector-ties": {
		why: "a selector (first, last, min, max) over several series that hold the selected point's time (or value) at once: " +
			"InfluxDB picks the series it iterates first, Cairn the one from the shard merged first; the time is the same, " +
			"the value may be another series'. Compared: everything but the selected values.",
		normalise: func(ref, got string) (string, string) {
			return tieValues.ReplaceAllString(ref, "$1_]"), tieValues.ReplaceAllString(got, "$1_]")
		},
	},
}

// diffCase is one request of the table: q against the database, with
// epoch when not "".
type diffCase struct {
	q, epoch  string
	exception string // a key of diffExceptions, or ""
	chunk     int    // > 0: chunked=true with this chunk_size
}

// diffDataset is two hours of 10 s points: cpu (hosts h0..h3 in regions
// eu/us, fields value and idle; h1 silent for 20 minutes), mem (used) and
// disk (h0, paths / and /var, free). Values are small integers and halves,
// so sums and means are exact whatever order they are added in.
func diffDataset() []string {
	var lines []string
	regions := []string{"eu", "eu", "us", "us"}
	for i := range 720 {
		ts := dayStart + int64(i)*10e9
		for h := range 4 {
			if !(h == 1 && i >= 200 && i < 320) {
				lines = append(lines, fmt.Sprintf("cpu,host=h%d,region=%s value=%d,idle=%d.5 %d", h, regions[h], (i*7+h*13)%101, (i*3+h)%50, ts))
			}
			lines = append(lines, fmt.Sprintf("mem,host=h%d,region=%s used=%d %d", h, regions[h], (i*11+h*5)%997*1000, ts))
		}
		for k, path := range []string{"/", "/var"} {
			lines = append(lines, fmt.Sprintf("disk,host=h0,path=%s free=%d %d", path, (i+k*500)%1000, ts))
		}
		if i%6 == 0 { // Telegraf's system input, typed, once a minute
			for h := range 2 {
				up := 86400*h + i*10
				lines = append(lines, fmt.Sprintf(`system,host=h%d load1=%d.25,n_users=%di,uptime=%di,uptime_format="%d days, %2d:%02d",online=%t %d`,
					h, (i+h)%7, (i/60+h)%4, up, up/86400, up%86400/3600, up%3600/60, (i/6+h)%3 != 0, ts))
			}
		}
	}
	return lines
}

// diffCases is the table.
func diffCases() []diffCase {
	const h = int64(3600e9)
	in := func(from, to int64) string {
		return fmt.Sprintf("time >= %d AND time < %d", dayStart+from, dayStart+to)
	}
	all := in(0, 2*h)
	var cases []diffCase
	add := func(exception string, qs ...string) {
		for _, q := range qs {
			cases = append(cases, diffCase{q: q, exception: exception})
		}
	}
	aggs := []string{"count(value)", "sum(value)", "mean(value)", "min(value)", "max(value)", "first(value)", "last(value)",
		"spread(value)", "median(value)", "mean(idle)", "sum(idle)", "max(idle)"}
	for _, agg := range aggs {
		add("",
			fmt.Sprintf("SELECT %s FROM cpu WHERE %s GROUP BY time(5m)", agg, all),
			fmt.Sprintf("SELECT %s FROM cpu WHERE %s GROUP BY time(10m), host", agg, all),
			fmt.Sprintf("SELECT %s FROM cpu WHERE host = 'h1' AND %s GROUP BY time(15m) fill(0)", agg, all),
			fmt.Sprintf("SELECT %s FROM cpu WHERE region =~ /^e/ AND %s GROUP BY host", agg, all),
			fmt.Sprintf("SELECT %s FROM cpu WHERE host = 'h1' AND %s GROUP BY time(7m, 2m) fill(previous)", agg, in(h/2, 3*h/2)),
			fmt.Sprintf("SELECT %s FROM cpu WHERE host = 'h1' AND %s GROUP BY time(5m) fill(linear)", agg, in(0, 2*h)),
			fmt.Sprintf("SELECT %s FROM cpu WHERE host != 'h0' AND %s GROUP BY time(30m), * fill(none)", agg, all),
		)
	}
	// Transformations over a pushed-down aggregate (Grafana's rates), some
	// starting mid-data so the bucket before the start is read.
	for _, inner := range []string{"mean(value)", "max(value)", "count(value)", "sum(idle)"} {
		add("",
			fmt.Sprintf("SELECT derivative(%s, 1s) FROM cpu WHERE %s GROUP BY time(5m)", inner, all),
			fmt.Sprintf("SELECT derivative(%s) FROM cpu WHERE host = 'h1' AND %s GROUP BY time(10m)", inner, in(h/2, 2*h)),
			fmt.Sprintf("SELECT non_negative_derivative(%s, 1m) FROM cpu WHERE %s GROUP BY time(10m), host", inner, in(h/3, 2*h)),
			fmt.Sprintf("SELECT non_negative_derivative(%s) FROM cpu WHERE host = 'h1' AND %s GROUP BY time(5m) fill(0)", inner, all),
			fmt.Sprintf("SELECT difference(%s) FROM cpu WHERE %s GROUP BY time(15m)", inner, in(h/4, 2*h)),
			fmt.Sprintf("SELECT non_negative_difference(%s) FROM cpu WHERE %s GROUP BY time(10m), region fill(previous)", inner, all),
			fmt.Sprintf("SELECT moving_average(%s, 3) FROM cpu WHERE host = 'h1' AND %s GROUP BY time(10m)", inner, in(h/2, 2*h)),
			fmt.Sprintf("SELECT cumulative_sum(%s) FROM cpu WHERE %s GROUP BY time(20m), host", inner, all),
			fmt.Sprintf("SELECT elapsed(%s, 1m) FROM cpu WHERE host = 'h1' AND %s GROUP BY time(10m)", inner, all),
			fmt.Sprintf("SELECT derivative(%s, 1s) FROM cpu WHERE %s GROUP BY time(10m) LIMIT 3 OFFSET 2", inner, all),
		)
	}
	// Transformations over raw points, per series.
	add("",
		"SELECT derivative(value) FROM cpu WHERE host = 'h0' AND "+in(0, 10*60e9),
		"SELECT derivative(value, 1m) FROM cpu WHERE host = 'h1' AND "+in(1000e9, 2400e9),
		"SELECT non_negative_derivative(value, 1s) FROM cpu WHERE "+in(0, 5*60e9)+" GROUP BY host",
		"SELECT difference(idle) FROM cpu WHERE host = 'h2' AND "+in(0, 5*60e9),
		"SELECT non_negative_difference(free) FROM disk WHERE "+in(0, 5*60e9)+" GROUP BY path",
		"SELECT cumulative_sum(value) FROM cpu WHERE host = 'h1' AND "+in(0, 5*60e9),
		"SELECT moving_average(value, 3) FROM cpu WHERE host = 'h1' AND "+in(0, 5*60e9),
		"SELECT elapsed(value, 1s) FROM cpu WHERE host = 'h1' AND "+in(1900e9, 3300e9),
		"SELECT difference(value) FROM cpu WHERE host = 'h1' AND "+in(0, 60e9)+" ORDER BY time DESC",
		"SELECT non_negative_difference(value) FROM cpu WHERE host = 'h1' AND "+in(0, 5*60e9)+" LIMIT 4 OFFSET 2",
		"SELECT derivative(used) FROM mem WHERE used > 500000 AND "+in(0, 10*60e9)+" GROUP BY host",
		"SELECT non_negative_derivative(idle, 10s) FROM cpu WHERE "+in(0, 3*60e9)+" GROUP BY *",
	)
	// top and bottom.
	add("",
		"SELECT top(value, 3) FROM cpu WHERE host = 'h0' AND "+in(0, 5*60e9),
		"SELECT bottom(value, 3) FROM cpu WHERE host = 'h0' AND "+in(0, 5*60e9),
		"SELECT top(value, host, 2) FROM cpu WHERE "+in(0, 5*60e9),
		"SELECT bottom(idle, host, 3) FROM cpu WHERE "+in(0, 5*60e9),
		"SELECT top(value, 2) FROM cpu WHERE host = 'h0' AND "+all+" GROUP BY time(30m)",
		"SELECT bottom(value, 1) FROM cpu WHERE host = 'h1' AND "+all+" GROUP BY time(20m)",
		"SELECT top(value, 2) FROM cpu WHERE "+in(0, 5*60e9)+" GROUP BY host",
		"SELECT top(free, 3) FROM disk WHERE path = '/' AND "+all,
		"SELECT bottom(free, path, 2) FROM disk WHERE "+all,
		"SELECT top(used, 2) FROM mem WHERE host = 'h2' AND "+all+" GROUP BY time(1h)",
		"SELECT top(value, 3) FROM cpu WHERE host = 'h3' AND value < 50 AND "+all,
		"SELECT top(value, region, 1) FROM cpu WHERE "+in(0, 5*60e9)+" GROUP BY host",
	)
	// percentile() alone reports its point's time.
	add("",
		"SELECT percentile(value, 50) FROM cpu WHERE host = 'h0' AND "+all,
		"SELECT percentile(value, 90) FROM cpu WHERE "+all+" GROUP BY host",
		"SELECT percentile(idle, 25) FROM cpu WHERE host = 'h1' AND "+all,
		"SELECT percentile(free, 99.9) FROM disk WHERE "+all+" GROUP BY path",
		"SELECT percentile(value, 0) FROM cpu WHERE host = 'h0' AND "+all,
		"SELECT percentile(used, 75) FROM mem WHERE used > 100000 AND "+all+" GROUP BY host",
	)
	add("selector-ties", "SELECT percentile(value, 99.9) FROM cpu WHERE "+all)
	// Subqueries, one level.
	add("",
		"SELECT max(m) FROM (SELECT mean(value) AS m FROM cpu WHERE "+all+" GROUP BY time(10m))",
		"SELECT max(m) FROM (SELECT mean(value) AS m FROM cpu WHERE "+all+" GROUP BY time(10m), host) GROUP BY host",
		"SELECT mean(m) FROM (SELECT max(value) AS m FROM cpu WHERE "+all+" GROUP BY time(10m), host) WHERE "+all+" GROUP BY time(1h)",
		"SELECT sum(m) FROM (SELECT last(value) AS m FROM cpu WHERE "+all+" GROUP BY host)",
		"SELECT count(value) FROM (SELECT value FROM cpu WHERE host = 'h2' AND "+in(0, 10*60e9)+")",
		"SELECT min(s) FROM (SELECT sum(used) AS s FROM mem WHERE "+all+" GROUP BY time(30m), host) WHERE host = 'h1'",
		"SELECT max(c) FROM (SELECT count(value) AS c FROM cpu WHERE "+all+" GROUP BY time(5m), host) WHERE c < 30 GROUP BY host",
		"SELECT spread(m) FROM (SELECT mean(free) AS m FROM disk WHERE "+all+" GROUP BY time(10m), path) GROUP BY path",
	)
	// Math over an aggregate.
	add("",
		"SELECT mean(value)*100 FROM cpu WHERE "+all+" GROUP BY time(10m)",
		"SELECT mean(value) * 100 / 2 FROM cpu WHERE "+all+" GROUP BY time(10m), host",
		"SELECT (max(value) - 10) / 3 FROM cpu WHERE host = 'h1' AND "+all+" GROUP BY time(5m)",
		"SELECT count(value) * 2 FROM cpu WHERE "+all+" GROUP BY time(30m)",
		"SELECT count(value) / 7 FROM cpu WHERE "+all+" GROUP BY time(30m), region",
		"SELECT 100 - mean(idle) FROM cpu WHERE "+all+" GROUP BY host",
		"SELECT sum(used) / 1024 FROM mem WHERE "+all+" GROUP BY time(1h), host",
		"SELECT max(value) * 2 FROM cpu WHERE host = 'h2' AND "+all,
		"SELECT mean(value) / 0 FROM cpu WHERE "+all,
		"SELECT mean(value) * 100 AS pct, max(value) FROM cpu WHERE "+all+" GROUP BY time(20m)",
		"SELECT last(free) + 0.5 FROM disk WHERE "+all+" GROUP BY time(30m), path fill(previous)",
		"SELECT -1 * min(value) FROM cpu WHERE "+all+" GROUP BY time(30m), host fill(none)",
	)
	// Conditions on field values, alone and mixed with tag conditions.
	for _, cond := range []string{"value > 50", "value >= 99", "value < 3", "value <= 1", "value = 5", "value != 0",
		"idle > 40.5", "value > idle", "value::field > 90"} {
		add("",
			fmt.Sprintf("SELECT count(value), mean(idle) FROM cpu WHERE %s AND %s GROUP BY time(30m)", cond, all),
			fmt.Sprintf("SELECT value, idle FROM cpu WHERE host = 'h2' AND %s AND %s", cond, in(0, 10*60e9)),
		)
	}
	add("",
		"SELECT mean(idle) FROM cpu WHERE (value > 90 OR host = 'h0') AND "+all+" GROUP BY time(30m), host",
		"SELECT max(value) FROM cpu WHERE value < 50 AND region = 'us' AND "+all+" GROUP BY host",
		"SELECT sum(used) FROM mem WHERE used > 500000 AND "+all+" GROUP BY time(1h), host fill(0)",
		"SELECT idle FROM cpu WHERE (value > 95 OR value < 2) AND "+all+" GROUP BY host",
		"SELECT * FROM cpu WHERE value < 3 AND host = 'h1' AND "+all,
		"SELECT free FROM disk WHERE free >= 995 AND "+all+" GROUP BY path",
		"SELECT count(value) FROM cpu WHERE value > 1000 AND "+all,
		"SELECT median(value) FROM cpu WHERE idle < 10 AND host =~ /h[02]/ AND "+all+" GROUP BY time(20m)",
		"SELECT derivative(mean(value), 1s) FROM cpu WHERE value > 20 AND "+all+" GROUP BY time(10m)",
		"SELECT first(idle), last(idle) FROM cpu WHERE value > 50 AND "+all,
	)
	// Several measurements: FROM a, b and FROM /regex/.
	add("",
		"SELECT mean(value) FROM mem, cpu WHERE "+all+" GROUP BY time(1h)",
		"SELECT max(used), max(value) FROM cpu, mem WHERE "+all,
		"SELECT count(free) FROM /d.*/ WHERE "+all,
		"SELECT count(value) FROM /^c/ WHERE "+all+" GROUP BY host",
		"SELECT mean(used), mean(free) FROM /m|d/ WHERE "+all+" GROUP BY time(30m), host",
		"SELECT * FROM cpu, disk WHERE host = 'h0' AND "+in(0, 20e9),
		"SELECT value FROM /c.*|w.*/ WHERE "+in(0, 20e9)+" GROUP BY host",
		"SELECT mean(value) FROM cpu, mem WHERE "+all+" GROUP BY time(1h) SLIMIT 1",
		"SELECT max(used), min(value) FROM cpu, mem WHERE "+all+" GROUP BY host SLIMIT 3 SOFFSET 2",
		"SELECT mean(value), mean(used) FROM cpu, mem, nope WHERE "+all+" GROUP BY time(1h) ORDER BY time DESC",
		"SELECT last(used) FROM /nothing/ WHERE "+all,
		"SELECT used, free FROM mem, disk WHERE host = 'h0' AND "+in(0, 30e9)+" GROUP BY *",
		`SELECT max(value) FROM "diff"."autogen"./cpu|mem/ WHERE `+all,
	)
	// Aggregates over every field, and count(distinct()).
	add("",
		"SELECT count(*) FROM cpu WHERE "+all,
		"SELECT mean(*), max(*) FROM cpu WHERE "+all+" GROUP BY time(1h)",
		"SELECT count(*), mean(value) FROM cpu WHERE "+all,
		"SELECT count(*) FROM cpu WHERE "+all+" GROUP BY time(1h), host fill(0)",
		"SELECT count(*) FROM cpu WHERE host = 'h1' AND "+all+" GROUP BY time(10m)",
		"SELECT percentile(*, 50) FROM cpu WHERE "+all,
		"SELECT count(/v.*/) FROM cpu WHERE "+all,
		"SELECT sum(/^(used|free)$/) FROM mem, disk WHERE "+all+" GROUP BY time(1h)",
		"SELECT mean(*) FROM mem, cpu WHERE "+all,
		"SELECT max(*) FROM disk WHERE "+all+" GROUP BY path",
		"SELECT spread(*) FROM cpu WHERE value > 50 AND "+all,
		"SELECT count(distinct(value)) FROM cpu WHERE "+all+" GROUP BY time(30m)",
		"SELECT count(distinct(value)) AS n FROM cpu WHERE "+all+" GROUP BY host",
		"SELECT count(distinct(idle)) FROM cpu WHERE host = 'h1' AND "+all+" GROUP BY time(10m)",
		"SELECT count(distinct(free)), count(free) FROM disk WHERE "+all+" GROUP BY path",
	)
	// Selectors alone report their point's time; several aggregates the
	// range's start.
	for _, sel := range []string{"min", "max", "first", "last"} {
		add("selector-ties", fmt.Sprintf("SELECT %s(value) FROM cpu WHERE %s", sel, all))
		add("",
			fmt.Sprintf("SELECT %s(value) FROM cpu WHERE %s GROUP BY host", sel, all),
			fmt.Sprintf("SELECT %s(free) FROM disk WHERE path = '/var' AND %s", sel, all),
		)
	}
	add("",
		"SELECT count(value), sum(value), mean(value) FROM cpu WHERE "+all,
		"SELECT min(value), max(value), mean(idle) FROM cpu WHERE "+all+" GROUP BY region",
		"SELECT mean(used) FROM mem WHERE "+all+" GROUP BY time(20m), host, region",
		"SELECT max(used) FROM mem WHERE "+all+" GROUP BY time(1h)",
		"SELECT sum(free) FROM disk WHERE "+all+" GROUP BY path",
		"SELECT count(free) FROM disk WHERE "+all+" GROUP BY time(30m), path fill(0)",
		"SELECT mean(value) FROM cpu WHERE "+all+" GROUP BY time(10m) ORDER BY time DESC",
		"SELECT mean(value) FROM cpu WHERE "+all+" GROUP BY time(10m), host LIMIT 3",
		"SELECT mean(value) FROM cpu WHERE "+all+" GROUP BY time(10m), host LIMIT 2 OFFSET 3",
		"SELECT mean(value) FROM cpu WHERE "+all+" GROUP BY time(10m), host SLIMIT 2",
		"SELECT mean(value) FROM cpu WHERE "+all+" GROUP BY time(10m), host SLIMIT 2 SOFFSET 1",
		"SELECT mean(value) FROM cpu WHERE "+in(-h, h)+" GROUP BY time(15m)",
		"SELECT mean(value) FROM cpu WHERE "+in(-h, h)+" GROUP BY time(15m) fill(none)",
		"SELECT mean(value) FROM cpu WHERE "+in(h/3, h)+" GROUP BY time(10m) fill(-1)",
		"SELECT count(value) FROM cpu WHERE host = 'nope' AND "+all,
		"SELECT mean(value) FROM nope WHERE "+all,
		`SELECT "value" FROM "diff"."autogen"."cpu" WHERE "host" = 'h2' AND `+in(0, 60e9),
		"SELECT mean(value) AS avg, max(value) AS peak FROM cpu WHERE "+all+" GROUP BY time(30m)",
		"SELECT mean(value) FROM cpu WHERE (host = 'h0' OR host = 'h3') AND "+all+" GROUP BY time(30m), host",
		"SELECT mean(value) FROM cpu WHERE host =~ /h[12]/ AND region = 'eu' AND "+all+" GROUP BY host",
		"SELECT mean(value) FROM cpu WHERE host !~ /h[12]/ AND "+all+" GROUP BY host",
		"SELECT last(value) FROM cpu WHERE "+all+" GROUP BY time(1h), host ORDER BY time DESC",
	)
	// Raw selects, one series at a time (InfluxDB orders points of equal
	// times across series by its own series ids).
	add("",
		"SELECT value FROM cpu WHERE host = 'h0' AND "+in(0, 60e9),
		"SELECT value, idle FROM cpu WHERE host = 'h3' AND "+in(0, 60e9),
		"SELECT * FROM cpu WHERE host = 'h2' AND "+in(0, 40e9),
		"SELECT value FROM cpu WHERE host = 'h1' AND "+in(0, h)+" LIMIT 5",
		"SELECT value FROM cpu WHERE host = 'h1' AND "+in(0, h)+" LIMIT 5 OFFSET 10",
		"SELECT value FROM cpu WHERE host = 'h1' AND "+in(0, h)+" ORDER BY time DESC LIMIT 4",
		"SELECT * FROM cpu WHERE "+all+" LIMIT 7 OFFSET 3",
		"SELECT value, host FROM cpu WHERE "+all+" ORDER BY time DESC LIMIT 6 OFFSET 1",
		"SELECT * FROM cpu LIMIT 2",
		"SELECT used FROM mem WHERE host = 'h2' AND "+all+" LIMIT 3 OFFSET 5000",
		"SELECT value FROM cpu WHERE "+in(0, 30e9)+" GROUP BY host",
		"SELECT value, host FROM cpu WHERE host = 'h2' AND "+in(0, 30e9),
		"SELECT free FROM disk WHERE "+in(0, 30e9)+" GROUP BY path",
		"SELECT used FROM mem WHERE host = 'h0' AND "+in(h, h+60e9),
		"SELECT value FROM cpu WHERE host = 'h1' AND "+in(2000e9, 2100e9),
	)
	for _, epoch := range []string{"ns", "u", "ms", "s", "m", "h"} {
		cases = append(cases, diffCase{q: "SELECT mean(value) FROM cpu WHERE " + all + " GROUP BY time(30m)", epoch: epoch},
			diffCase{q: "SELECT value FROM cpu WHERE host = 'h0' AND " + in(0, 30e9), epoch: epoch})
	}
	add("",
		"SHOW MEASUREMENTS",
		"SHOW MEASUREMENTS LIMIT 2",
		"SHOW MEASUREMENTS WITH MEASUREMENT =~ /m.*/",
		"SHOW MEASUREMENTS WHERE host = 'h0'",
		"SHOW TAG KEYS",
		"SHOW TAG KEYS FROM cpu",
		"SHOW TAG VALUES WITH KEY = host",
		"SHOW TAG VALUES FROM cpu WITH KEY = region",
		"SHOW TAG VALUES FROM cpu WITH KEY IN (host, region)",
		"SHOW TAG VALUES FROM cpu WITH KEY =~ /reg/",
		"SHOW TAG VALUES FROM disk WITH KEY = path WHERE host = 'h0'",
		"SHOW FIELD KEYS",
		"SHOW FIELD KEYS FROM mem",
		"SHOW SERIES",
		"SHOW SERIES FROM disk",
		"SHOW SERIES WHERE host = 'h3'",
		"SHOW SERIES FROM cpu WHERE region = 'us' LIMIT 1",
		"SHOW RETENTION POLICIES",
		"SHOW SERIES CARDINALITY",
		"SHOW SERIES EXACT CARDINALITY",
		"SHOW SERIES CARDINALITY FROM cpu",
		"SHOW SERIES CARDINALITY WHERE region = 'eu'",
		"SHOW SERIES EXACT CARDINALITY FROM /m|d/",
		"SHOW SERIES EXACT CARDINALITY FROM cpu WHERE host = 'h0'",
		"SHOW SERIES CARDINALITY FROM nope",
		"SHOW SERIES CARDINALITY WHERE host = 'zz'",
		"SHOW MEASUREMENT CARDINALITY",
		"SHOW MEASUREMENT EXACT CARDINALITY",
		"SHOW MEASUREMENT CARDINALITY WHERE host = 'h0'",
		"SHOW MEASUREMENT EXACT CARDINALITY FROM /c|d/",
		"SHOW MEASUREMENT CARDINALITY FROM cpu",
		"SHOW MEASUREMENT EXACT CARDINALITY WHERE host = 'zz'",
		"SHOW MEASUREMENT CARDINALITY ON diff",
		"SHOW MEASUREMENTS; SHOW TAG KEYS FROM mem; SELECT max(value) FROM cpu WHERE "+all,
	)
	// Typed fields (issue 21): integers, a string, a boolean.
	add("",
		"SELECT * FROM system WHERE host = 'h0' AND "+in(0, 300e9),
		"SELECT uptime, uptime_format, online FROM system WHERE "+in(0, 180e9)+" GROUP BY host",
		"SELECT last(uptime_format), first(uptime_format), count(uptime_format) FROM system WHERE "+all,
		"SELECT last(uptime_format) FROM system WHERE host = 'h1' AND "+all,
		"SELECT last(uptime_format) FROM system WHERE "+all+" GROUP BY time(30m), host",
		"SELECT sum(uptime), max(uptime), min(n_users), spread(uptime), mean(uptime), first(n_users) FROM system WHERE "+all,
		"SELECT max(uptime), sum(n_users) FROM system WHERE "+all+" GROUP BY time(20m) fill(none)",
		"SELECT min(online), max(online), last(online), count(online) FROM system WHERE "+all+" GROUP BY host",
		"SELECT percentile(uptime, 50), median(uptime) FROM system WHERE "+all,
		"SELECT count(*) FROM system WHERE "+all,
		"SELECT mean(*) FROM system WHERE "+all,
		"SELECT sum(uptime_format) FROM system WHERE "+all,
		"SELECT median(online) FROM system WHERE "+all,
		"SHOW FIELD KEYS FROM system",
	)
	// Chunked answers (the influx CLI's): raw selects stream page by page,
	// the others are cut into chunks of the whole answer.
	cases = append(cases, []diffCase{
		{q: "SELECT * FROM cpu WHERE host = 'h0' AND " + in(0, 600e9), chunk: 7},
		{q: "SELECT * FROM cpu WHERE host = 'h2' AND " + in(0, 600e9) + " ORDER BY time DESC", chunk: 25, epoch: "ms"},
		{q: "SELECT value, region FROM cpu WHERE host = 'h3' AND " + in(h, h+300e9), chunk: 30},
		{q: "SELECT * FROM system WHERE host = 'h1' AND " + all, chunk: 9, epoch: "s"},
		{q: "SELECT used FROM mem WHERE host = 'h0' AND " + in(0, 100e9), chunk: 10000},
		{q: "SELECT free FROM disk WHERE host = 'zz' AND " + all, chunk: 5},
		{q: "SELECT mean(value) FROM cpu WHERE " + all + " GROUP BY time(10m), host", chunk: 5},
		{q: "SELECT * FROM cpu WHERE host = 'h0' AND " + all + " LIMIT 20 OFFSET 5", chunk: 6},
		{q: "SELECT value FROM cpu WHERE host = 'h1' AND " + all + " ORDER BY time DESC LIMIT 9", chunk: 4},
	}...)
	// tz(): buckets at the zone's round times, times written in it.
	add("",
		"SELECT mean(value) FROM cpu WHERE "+all+" GROUP BY time(30m) tz('America/Chicago')",
		"SELECT max(idle) FROM cpu WHERE "+all+" GROUP BY time(1h), host tz('Asia/Kolkata')",
		"SELECT count(value) FROM cpu WHERE "+all+" GROUP BY time(1d) tz('Pacific/Auckland')",
		"SELECT count(value) FROM cpu WHERE "+all+" GROUP BY time(1d, 2h) fill(none) tz('America/Los_Angeles')",
		"SELECT max(value) FROM cpu WHERE "+all+" tz('Europe/Paris')",
		"SELECT mean(value) FROM cpu WHERE "+all+" tz('Europe/Paris')",
		"SELECT value, host FROM cpu WHERE host = 'h0' AND "+in(0, 120e9)+" tz('Asia/Kolkata')",
		"SELECT derivative(mean(value), 1m) FROM cpu WHERE "+all+" GROUP BY time(20m) tz('Asia/Kathmandu')",
		"SELECT value FROM cpu WHERE "+in(0, 60e9)+" tz('Mars/Olympus')",
	)
	cases = append(cases,
		diffCase{q: "SELECT mean(value) FROM cpu WHERE " + all + " GROUP BY time(1h) tz('Asia/Kolkata')", epoch: "ms"},
		diffCase{q: "SELECT * FROM cpu WHERE host = 'h1' AND " + in(0, 300e9) + " tz('America/New_York')", chunk: 4},
	)
	// distinct() and sample() (all the points when N is no less than them:
	// InfluxDB's choice past that is random).
	add("",
		"SELECT distinct(value) FROM cpu WHERE host = 'h0' AND "+in(0, 1800e9),
		"SELECT distinct(value) FROM cpu WHERE host = 'h1' AND "+all+" GROUP BY time(30m)",
		"SELECT distinct(idle) FROM cpu WHERE "+all+" GROUP BY host",
		"SELECT distinct(value) FROM cpu WHERE host = 'h2' AND "+all+" GROUP BY time(20m) LIMIT 3",
		"SELECT distinct(value) FROM cpu WHERE host = 'h3'",
		"SELECT distinct(uptime_format) FROM system WHERE host = 'h0' AND "+in(0, 600e9),
		"SELECT distinct(online) FROM system WHERE "+all+" GROUP BY host",
		"SELECT distinct(n_users) FROM system WHERE host = 'h1' AND "+all,
		"SELECT distinct(host) FROM cpu WHERE "+all,
		"SELECT distinct(value), max(value) FROM cpu WHERE "+all,
		"SELECT distinct(*) FROM cpu WHERE "+all,
		"SELECT distinct(value, 2) FROM cpu WHERE "+all,
		"SELECT sample(value, 1000) FROM cpu WHERE host = 'h0' AND "+in(0, 600e9),
		"SELECT sample(value, 100) FROM cpu WHERE host = 'h3' AND "+all+" GROUP BY time(10m)",
		"SELECT sample(used, 5) FROM mem WHERE host = 'h1' AND "+in(0, 40e9),
		"SELECT sample(uptime, 200) FROM system WHERE "+all+" GROUP BY host",
		"SELECT sample(value) FROM cpu WHERE "+all,
		"SELECT sample(value, 0) FROM cpu WHERE "+all,
		"SELECT sample(value, 1.5) FROM cpu WHERE "+all,
	)
	// Grafana's panels send their queries as one request.
	add("stop-at-first-error",
		"SELECT mean(value) FROM cpu WHERE "+all+" GROUP BY time(30m); SELECT mean(value) FROM cpu GROUP BY time(blah); SELECT max(value) FROM cpu WHERE "+all,
	)
	return cases
}

// queryBody runs one case against addr and returns the status and body.
func queryBody(t *testing.T, addr, db string, c diffCase) (int, string) {
	t.Helper()
	form := url.Values{"db": {db}, "q": {c.q}}
	if c.epoch != "" {
		form.Set("epoch", c.epoch)
	}
	if c.chunk > 0 {
		form.Set("chunked", "true")
		form.Set("chunk_size", fmt.Sprint(c.chunk))
	}
	resp, err := http.PostForm("http://"+addr+"/query", form)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestInfluxQLDifferential: every query of the table answers the same
// status and the same bytes from Cairn (a database of 4 shards, merged by
// the broker) as from a reference InfluxDB 1.x holding the same points,
// but for the documented exceptions.
func TestInfluxQLDifferential(t *testing.T) {
	ref := startInfluxRef(t)
	p := startInfluxStandalone(t, map[string]int{"diff": 4})
	influxDDL(t, ref, "CREATE DATABASE diff")
	lines := diffDataset()
	writeLines(t, ref, "diff", append([]string{"warmup value=1 1"}, lines...)) // startInfluxStandalone's warmup point
	writeLines(t, p.addr, "diff", lines)

	cases := diffCases()
	exceptions := 0
	for _, c := range cases {
		refCode, refBody := queryBody(t, ref, "diff", c)
		code, body := queryBody(t, p.addr, "diff", c)
		if c.exception != "" {
			ex, ok := diffExceptions[c.exception]
			require.True(t, ok, "unknown exception %q", c.exception)
			exceptions++
			refBody, body = ex.normalise(refBody, body)
		}
		if refCode != code || refBody != body {
			t.Errorf("%s (epoch %q, chunk %d):\n  influxdb %d: %s\n  cairn    %d: %s", c.q, c.epoch, c.chunk, refCode, clip(refBody), code, clip(body))
		}
	}
	// The typed cases compare data, not two empty answers: both stored
	// every system point (2 hosts, one a minute for 2 hours).
	for _, addr := range []string{ref, p.addr} {
		_, body := queryBody(t, addr, "diff", diffCase{q: "SELECT count(uptime_format), count(online) FROM system"})
		require.Contains(t, body, `,240,240]`, addr)
	}
	t.Logf("%d queries compared with InfluxDB %s; %d under %d documented exceptions", len(cases), "1.x", exceptions, len(diffExceptions))
	require.GreaterOrEqual(t, len(cases), 300)
}

func clip(s string) string {
	if len(s) > 600 {
		return s[:600] + "..."
	}
	return s
}
