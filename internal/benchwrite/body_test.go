package benchwrite

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// refBody renders the lines a sender of series [first, first+n) sends from
// its series next in pass pass on, one at a time with fmt and strconv: the
// reference sender.batch must agree with.
func refBody(p *Params, first, n, next int, pass int64, lines int) string {
	var b strings.Builder
	unit := precisionUnits[p.Precision]
	for range lines {
		id := first + next
		v := pass + int64(next)
		var fields []string
		for k, count := range p.mix {
			for i := range count {
				var val string
				switch fieldKinds[k] {
				case "float":
					val = strconv.FormatFloat(float64(v%1000)/4, 'f', -1, 64)
				case "int":
					val = fmt.Sprintf("%di", v%100000-50000)
				case "uint":
					val = fmt.Sprintf("%du", v%100000)
				case "string":
					val = fmt.Sprintf(`"v%d"`, v%64)
				case "bool":
					val = strconv.FormatBool(v%2 == 0)
				}
				fields = append(fields, fmt.Sprintf("%c%d=%s", fieldKinds[k][0], i, val))
			}
		}
		ts := p.Start.Add(time.Duration(pass)*p.Interval).UnixNano() / int64(unit)
		fmt.Fprintf(&b, "%s,host=h%d,region=r%d %s %d\n", p.Measurement, id, id/1000, strings.Join(fields, ","), ts)
		if next++; next == n {
			next, pass = 0, pass+1
		}
	}
	return b.String()
}

// TestBatchBody: the batches a sender renders are the reference's lines,
// across passes (the timestamp and the values change) and field mixes.
func TestBatchBody(t *testing.T) {
	for _, tc := range []struct {
		fields, precision string
		first, n, batch   int
	}{
		{"float=1", "ns", 40_000, 7, 3},
		{"float=1", "s", 0, 1, 5},
		{"float=2,int=1,uint=1,string=1,bool=1", "ms", 123, 10, 4},
		{"float=1", "us", 999_990, 2_000, 1_500},
	} {
		p := Params{URL: "http://x:1", DB: "d", Series: 1, Senders: 1, Batch: tc.batch, Duration: time.Second,
			Precision: tc.precision, Fields: tc.fields, Start: time.Unix(1_700_000_000, 0)}
		require.NoError(t, p.Validate())
		s := &sender{p: &p, first: tc.first, n: tc.n}
		keys := s.keys()
		var body []byte
		for range 4000 / tc.batch {
			next, pass := s.next, s.pass
			body = s.batch(body[:0], keys)
			require.Equal(t, refBody(&p, tc.first, tc.n, next, pass, tc.batch), string(body), "%+v at %d/%d", tc, next, pass)
		}
	}
}

func BenchmarkBatch5000(b *testing.B) {
	p := Params{URL: "http://x:1", DB: "d", Series: 5000, Senders: 1, Batch: 5000, Duration: time.Second, Precision: "ns"}
	require.NoError(b, p.Validate())
	p.Start = time.Unix(1_700_000_000, 0)
	s := &sender{p: &p, first: 40_000, n: 5000}
	keys := s.keys()
	var body []byte
	b.ReportAllocs()
	for b.Loop() {
		body = s.batch(body[:0], keys)
	}
}
