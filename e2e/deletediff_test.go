package e2e

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeleteDifferential: the differential suite's data in a reference
// InfluxDB 1.x and in Cairn (2 shards); a sequence of DELETE, DROP SERIES
// and DROP MEASUREMENT statements, each followed by queries: every
// statement and every query answers the same status and bytes.
func TestDeleteDifferential(t *testing.T) {
	ref := startInfluxRef(t)
	p := startInfluxStandalone(t, map[string]int{"del": 2})
	influxDDL(t, ref, "CREATE DATABASE del")
	lines := diffDataset()
	writeLines(t, ref, "del", append([]string{"warmup value=1 1"}, lines...)) // startInfluxStandalone's warmup point
	writeLines(t, p.addr, "del", lines)

	const m = int64(60e9)
	all := fmt.Sprintf("time >= %d AND time < %d", dayStart, dayStart+120*m)
	counts := []string{
		"SELECT count(value), count(idle) FROM cpu WHERE " + all + " GROUP BY host",
		"SELECT count(value) FROM cpu WHERE " + all + " GROUP BY time(30m), host",
		"SELECT count(used) FROM mem WHERE " + all + " GROUP BY host",
		"SELECT count(free) FROM disk WHERE " + all,
		"SELECT count(load1) FROM system WHERE " + all,
		"SELECT first(value), last(value) FROM cpu WHERE " + all + " GROUP BY host",
	}
	steps := []struct {
		stmt    string
		queries []string
	}{
		{"SELECT count(value) FROM cpu WHERE " + all, counts},
		{fmt.Sprintf("DELETE FROM cpu WHERE host = 'h0' AND time < %d", dayStart+60*m), append(counts, "SHOW SERIES FROM cpu")},
		{"DROP SERIES FROM cpu WHERE host = 'h1'", append(counts, "SHOW SERIES FROM cpu", "SHOW TAG VALUES FROM cpu WITH KEY = host")},
		{"DROP MEASUREMENT disk", append(counts, "SHOW MEASUREMENTS", "SHOW SERIES")},
		{fmt.Sprintf("DELETE FROM mem WHERE region = 'eu' AND time >= %d AND time <= %d", dayStart+10*m, dayStart+20*m), counts},
		{fmt.Sprintf("DELETE FROM cpu, mem, system WHERE time < %d", dayStart+30*m), counts},
	}
	n := 0
	for _, s := range steps {
		for _, q := range append([]string{s.stmt}, s.queries...) {
			refCode, refBody := queryBody(t, ref, "del", diffCase{q: q})
			code, body := queryBody(t, p.addr, "del", diffCase{q: q})
			n++
			if refCode != code || refBody != body {
				t.Errorf("after %q: %s:\n  influxdb %d: %s\n  cairn    %d: %s", s.stmt, q, refCode, clip(refBody), code, clip(body))
			}
		}
	}
	// A write after the deletes, before their cutoffs, is answered by both.
	late := []string{fmt.Sprintf("cpu,host=h0,region=eu value=7,idle=1.5 %d", dayStart+m)}
	writeLines(t, ref, "del", late)
	writeLines(t, p.addr, "del", late)
	for _, q := range counts {
		refCode, refBody := queryBody(t, ref, "del", diffCase{q: q})
		code, body := queryBody(t, p.addr, "del", diffCase{q: q})
		n++
		if refCode != code || refBody != body {
			t.Errorf("after a late write: %s:\n  influxdb %d: %s\n  cairn    %d: %s", q, refCode, clip(refBody), code, clip(body))
		}
	}
	// The comparisons are of data, not of two empty answers.
	_, body := queryBody(t, p.addr, "del", diffCase{q: counts[0]})
	require.Contains(t, body, `"tags":{"host":"h0"},"columns":["time","count","count_1"],"values":[["2023-11-14T00:00:00Z",361,361]]`)
	require.NotContains(t, body, `"h1"`)
	t.Logf("%d statements and queries compared with InfluxDB 1.x around %d deletes", n, len(steps)-1)
}
