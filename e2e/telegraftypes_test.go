package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// telegrafField is one field of Telegraf's default inputs with the type
// Telegraf sends it in, and a value of that type for a point.
type telegrafField struct {
	name, typ string
	value     func(host, i int) string // as line protocol writes it
}

// telegrafInputs are the measurements of Telegraf's default config (cpu,
// mem, disk, diskio, net, processes, system) with their real field types:
// gauges as floats, counters and sizes as integers, system's uptime_format
// a string. System comes as Telegraf sends it: three lines per host.
var telegrafInputs = []struct {
	measurement, tags string
	lines             [][]telegrafField
}{
	{"cpu", "cpu=cpu-total", [][]telegrafField{{
		fl("usage_user"), fl("usage_system"), fl("usage_idle"), fl("usage_iowait"), fl("usage_irq"),
		fl("usage_softirq"), fl("usage_steal"), fl("usage_guest"), fl("usage_guest_nice"), fl("usage_nice"),
	}}},
	{"mem", "", [][]telegrafField{{
		in("total"), in("available"), in("used"), in("free"), in("cached"), in("buffers"), in("active"),
		in("inactive"), in("slab"), in("swap_total"), in("swap_free"), in("dirty"), fl("used_percent"), fl("available_percent"),
	}}},
	{"disk", "device=sda1,fstype=ext4,mode=rw,path=/", [][]telegrafField{{
		in("total"), in("free"), in("used"), in("inodes_total"), in("inodes_free"), in("inodes_used"), fl("used_percent"),
	}}},
	{"diskio", "name=sda", [][]telegrafField{{
		in("reads"), in("writes"), in("read_bytes"), in("write_bytes"), in("read_time"), in("write_time"),
		in("io_time"), in("weighted_io_time"), in("iops_in_progress"), in("merged_reads"), in("merged_writes"),
	}}},
	{"net", "interface=eth0", [][]telegrafField{{
		in("bytes_sent"), in("bytes_recv"), in("packets_sent"), in("packets_recv"), in("err_in"), in("err_out"),
		in("drop_in"), in("drop_out"),
	}}},
	{"processes", "", [][]telegrafField{{
		in("blocked"), in("running"), in("sleeping"), in("stopped"), in("total"), in("zombies"), in("dead"),
		in("wait"), in("idle"), in("paging"), in("total_threads"), in("unknown"),
	}}},
	{"system", "", [][]telegrafField{
		{fl("load1"), fl("load5"), fl("load15"), in("n_cpus"), in("n_users")},
		{in("uptime")},
		{{"uptime_format", "string", func(host, i int) string { return fmt.Sprintf(`"%d days, %2d:%02d"`, host, i, 7*i) }}},
	}},
}

func fl(name string) telegrafField {
	return telegrafField{name, "float", func(host, i int) string { return fmt.Sprintf("%d.%d25", 10*host+i, len(name)) }}
}

// in's values are past 2^53 for the byte counters, as a busy disk's are.
func in(name string) telegrafField {
	return telegrafField{name, "integer", func(host, i int) string {
		return fmt.Sprintf("%di", int64(1)<<(40+len(name)%20)+int64(1000*host+i))
	}}
}

// telegrafRounds is rounds of every input for hosts h0 and h1, in
// seconds, Telegraf's precision.
func telegrafRounds(rounds []int) string {
	var b strings.Builder
	for _, i := range rounds {
		for host := range 2 {
			for _, in := range telegrafInputs {
				tags := ",host=h" + fmt.Sprint(host)
				if in.tags != "" {
					tags = "," + in.tags + tags
				}
				for _, line := range in.lines {
					fields := make([]string, len(line))
					for k, f := range line {
						fields[k] = f.name + "=" + f.value(host, i)
					}
					fmt.Fprintf(&b, "%s%s %s %d\n", in.measurement, tags, strings.Join(fields, ","), 1_700_000_000+10*i)
				}
			}
		}
	}
	return b.String()
}

// TestTelegrafTypes (issue 21): a capture shaped as Telegraf's default
// inputs (cpu, mem, disk, diskio, net, processes, system with their real
// field types, system's uptime_format a string) written through /write and
// /api/v2/write is stored whole: every point of every field answers a raw
// select with its value in its type (integers exact past 2^53, the string
// as a string), count(*) counts them all, last(uptime_format) is the last
// string, and SHOW FIELD KEYS names each field's type. A point of another
// type than its field's is then refused by InfluxDB's field type conflict
// as a partial write, the batch's other lines stored.
func TestTelegrafTypes(t *testing.T) {
	p := startInfluxStandalone(t, map[string]int{"telegraf": 4})
	for path, rounds := range map[string][]int{
		"/write?db=telegraf&precision=s":            {0, 1, 2},
		"/api/v2/write?bucket=telegraf&precision=s": {3, 4},
	} {
		code, msg, err := postData(p.client, "http://"+p.addr+path, []byte(telegrafRounds(rounds)))
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, code, "%s: %s", path, msg)
	}
	const rounds, hosts = 5, 2
	for _, in := range telegrafInputs {
		var fields []telegrafField
		for _, line := range in.lines {
			fields = append(fields, line...)
		}
		code, res := influxQL(t, p.addr, "telegraf", fmt.Sprintf("SELECT * FROM %s GROUP BY host", in.measurement), "s")
		require.Equal(t, http.StatusOK, code)
		require.Empty(t, res.Results[0].Error)
		series := res.Results[0].Series
		require.Len(t, series, hosts, in.measurement)
		for _, s := range series {
			var host int
			_, err := fmt.Sscanf(s.Tags["host"], "h%d", &host)
			require.NoError(t, err)
			require.Len(t, s.Values, rounds, "%s %s: one row per round, every line of a round in it", in.measurement, s.Tags["host"])
			for i, row := range s.Values {
				for _, f := range fields {
					col := slices.Index(s.Columns, f.name)
					require.GreaterOrEqual(t, col, 0, "%s.%s", in.measurement, f.name)
					want := typedJSON(t, f.value(host, i))
					require.Equal(t, want, row[col], "%s.%s host %d round %d", in.measurement, f.name, host, i)
				}
			}
		}
		code, res = influxQL(t, p.addr, "telegraf", "SELECT count(*) FROM "+in.measurement, "")
		require.Equal(t, http.StatusOK, code)
		require.Len(t, res.Results[0].Series[0].Values[0], len(fields)+1, in.measurement)
		for _, n := range res.Results[0].Series[0].Values[0][1:] {
			require.Equal(t, json.Number(fmt.Sprint(rounds*hosts)), n, in.measurement)
		}
		code, res = influxQL(t, p.addr, "telegraf", "SHOW FIELD KEYS FROM "+in.measurement, "")
		require.Equal(t, http.StatusOK, code)
		var want, got [][]any
		for _, f := range fields {
			want = append(want, []any{f.name, f.typ})
		}
		got = res.Results[0].Series[0].Values
		require.ElementsMatch(t, want, got, in.measurement)
	}

	code, res := influxQL(t, p.addr, "telegraf", "SELECT last(uptime_format), count(uptime_format), max(uptime) FROM system WHERE host = 'h1'", "s")
	require.Equal(t, http.StatusOK, code)
	require.Empty(t, res.Results[0].Error)
	require.Equal(t, []any{json.Number("0"), `1 days,  4:28`, json.Number("5"), typedJSON(t, in("uptime").value(1, 4))},
		res.Results[0].Series[0].Values[0])
	code, res = influxQL(t, p.addr, "telegraf", "SELECT sum(uptime_format) FROM system", "")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "unsupported sum iterator type: *query.stringInterruptIterator", res.Results[0].Error)

	// mem's total is an integer: a float total is refused, the line
	// beside it stored.
	code, msg, err := postData(p.client, "http://"+p.addr+"/write?db=telegraf&precision=s",
		[]byte("mem,host=h9 total=1.5 1700000100\nmem,host=h9 free=7i 1700000100\n"))
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, code)
	require.JSONEq(t, `{"error":"partial write: field type conflict: input field \"total\" on measurement \"mem\" is type float, already exists as type integer dropped=1"}`, msg)
	code, res = influxQL(t, p.addr, "telegraf", "SELECT free, total FROM mem WHERE host = 'h9'", "s")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, [][]any{{json.Number("1700000100"), json.Number("7"), nil}}, res.Results[0].Series[0].Values)
}

// typedJSON is a line protocol value as /query answers it, decoded with
// json.Number.
func typedJSON(t *testing.T, lp string) any {
	switch {
	case strings.HasSuffix(lp, "i"):
		return json.Number(strings.TrimSuffix(lp, "i"))
	case strings.HasPrefix(lp, `"`):
		var s string
		require.NoError(t, json.Unmarshal([]byte(lp), &s))
		return s
	case lp == "true" || lp == "false":
		return lp == "true"
	}
	return json.Number(lp)
}
