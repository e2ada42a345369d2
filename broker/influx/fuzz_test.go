package influx

import (
	"strings"
	"testing"

	"github.com/influxdata/influxql"
)

// FuzzQueryText (issue 26): whatever a /query request carries, the bounds
// check and the InfluxQL parser behind it return (a parse error or a
// query), never crash or overflow the stack: a query past the bounds is
// refused before the parser sees it.
func FuzzQueryText(f *testing.F) {
	for _, q := range []string{
		"SELECT mean(value) FROM cpu WHERE time > now() - 1h GROUP BY time(1m), host fill(none)",
		"SHOW TAG VALUES WITH KEY =~ /.*/",
		"SELECT * FROM (SELECT max(v) FROM m GROUP BY time(5m)) WHERE \"host\" = 'a(b'",
		strings.Repeat("(", 200) + "1" + strings.Repeat(")", 200),
		"SELECT 'unterminated",
		"SELECT a FROM b; SHOW DATABASES; DROP DATABASE x",
	} {
		f.Add(q, `{"x":1}`)
	}
	f.Fuzz(func(t *testing.T, q, params string) {
		if checkQueryText(q, 4096) != nil {
			return
		}
		p := influxql.NewParser(strings.NewReader(q))
		if params != "" {
			p.SetParams(map[string]any{"p": params})
		}
		_, _ = p.ParseQuery()
	})
}
