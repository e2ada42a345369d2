package influx

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// memShard is one shard's series in memory, evaluated by query.Evaluate as
// a storage node does: a query.Source and a query.Bounder.
type memShard map[string][]models.SeriesPoint // series key -> points by ts

func (m memShard) keys(metric string) []string {
	var keys []string
	for k := range m {
		if strings.HasPrefix(k, metric+",") || strings.HasPrefix(k, metric+"#") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

func (m memShard) Scan(metric string, _ map[string]string, start, end int64, keep func(string) bool, visit func(string, []models.SeriesPoint) error) error {
	for _, k := range m.keys(metric) {
		if !keep(k) {
			continue
		}
		var in []models.SeriesPoint
		for _, p := range m[k] {
			if p.TS >= start && p.TS <= end {
				in = append(in, p)
			}
		}
		if len(in) > 0 {
			if err := visit(k, in); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m memShard) Bounds(metric string, _ map[string]string, keep func(string) bool) (lo, hi int64, ok bool, err error) {
	for _, k := range m.keys(metric) {
		if pts := m[k]; len(pts) > 0 && keep(k) {
			if !ok {
				lo, hi = pts[0].TS, pts[len(pts)-1].TS
			}
			lo, hi, ok = min(lo, pts[0].TS), max(hi, pts[len(pts)-1].TS), true
		}
	}
	return lo, hi, ok, nil
}

// evalBackend runs every statement over its shards through the wire
// format, and records the largest shard answer of a raw page.
type evalBackend struct {
	fakeBackend
	shards   []memShard
	selects  int
	maxShard int // most raw points one shard answered
}

func (b *evalBackend) Database(db string) (models.Database, error) {
	return models.Database{Name: db, NumShards: len(b.shards)}, nil
}

func (b *evalBackend) Select(ctx context.Context, _ string, req *query.ShardRequest) ([]*query.ShardResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // as the shards' requests end
	}
	b.selects++
	var out []*query.ShardResult
	for _, s := range b.shards {
		res, err := query.Evaluate(s, req)
		if err != nil {
			return nil, err
		}
		res, err = query.UnmarshalResult(query.MarshalResult(res, req.Stats))
		if err != nil {
			return nil, err
		}
		n := 0
		for _, r := range res.Raw {
			n += len(r.TS)
		}
		b.maxShard = max(b.maxShard, n)
		out = append(out, res)
	}
	return out, nil
}

func (b *evalBackend) SeriesKeys(context.Context, string, string) (models.SeriesList, error) {
	var list models.SeriesList
	for _, s := range b.shards {
		for k := range s {
			list.Keys = append(list.Keys, k)
		}
	}
	return list, nil
}

// streamBackend spreads 3 series over 2 shards: host a has fields v and w
// (w on every third point), host b field v at other times; 3,000 points.
func streamBackend() *evalBackend {
	b := &evalBackend{shards: []memShard{{}, {}}}
	for i := range 1000 {
		ts := int64(1_600_000_000_000_000_000 + i*int(time.Second) + i%7)
		b.shards[0]["m,host=a#v"] = append(b.shards[0]["m,host=a#v"], models.SeriesPoint{TS: ts, Value: float64(i)})
		if i%3 == 0 {
			b.shards[0]["m,host=a#w"] = append(b.shards[0]["m,host=a#w"], models.SeriesPoint{TS: ts, Value: float64(-i)})
		}
		tb := ts + int64(i%2)*500 // the same time as host a's for even i
		b.shards[1]["m,host=b#v"] = append(b.shards[1]["m,host=b#v"], models.SeriesPoint{TS: tb, Value: float64(i) / 4})
	}
	return b
}

type chunkLine struct {
	Results []struct {
		StatementID int  `json:"statement_id"`
		Partial     bool `json:"partial"`
		Series      []struct {
			Name    string   `json:"name"`
			Columns []string `json:"columns"`
			Values  [][]any  `json:"values"`
			Partial bool     `json:"partial"`
		} `json:"series"`
		Error string `json:"error"`
	} `json:"results"`
}

// TestStreamedSelect: a chunked raw select is read page by page (many
// shard requests, none answering more than its share of a page) and
// answers the same rows, in the same order, as the whole answer, in chunks
// of chunk_size values, partial on all but the last; the same holds in
// descending order and with a tag condition and a time range.
func TestStreamedSelect(t *testing.T) {
	for _, q := range []string{
		"SELECT * FROM m",
		"SELECT v, host FROM m ORDER BY time DESC",
		"SELECT w FROM m WHERE host = 'a' AND time >= '2020-09-13T12:30:00Z' AND time < '2020-09-13T12:40:00Z'",
		"SELECT v FROM m WHERE v > 100",
	} {
		t.Run(q, func(t *testing.T) {
			b := streamBackend()
			e := gin.New()
			h := New(Config{Backend: b, PagePoints: 100})
			h.Routes(e.Group("/"), e.Group("/"), e.Group("/"))
			get := func(params string) string {
				w := httptest.NewRecorder()
				e.ServeHTTP(w, httptest.NewRequest("GET", "/query?db=db&"+params+"&q="+url.QueryEscape(q), nil))
				require.Equal(t, 200, w.Code, w.Body.String())
				return w.Body.String()
			}
			var whole chunkLine
			require.NoError(t, json.Unmarshal([]byte(get("epoch=ns")), &whole))
			require.Len(t, whole.Results[0].Series, 1)
			want := whole.Results[0].Series[0]

			b.selects, b.maxShard = 0, 0
			sc := bufio.NewScanner(strings.NewReader(get("epoch=ns&chunked=true&chunk_size=7")))
			sc.Buffer(nil, 1<<20)
			var values [][]any
			var lines []chunkLine
			for sc.Scan() {
				var l chunkLine
				require.NoError(t, json.Unmarshal(sc.Bytes(), &l))
				lines = append(lines, l)
			}
			for i, l := range lines {
				last := i == len(lines)-1
				r := l.Results[0]
				require.Empty(t, r.Error)
				require.Equal(t, !last, r.Partial)
				require.Len(t, r.Series, 1)
				s := r.Series[0]
				require.Equal(t, want.Columns, s.Columns)
				require.Equal(t, !last, s.Partial)
				require.LessOrEqual(t, len(s.Values), 7)
				if !last {
					require.Len(t, s.Values, 7)
				}
				values = append(values, s.Values...)
			}
			require.Equal(t, want.Values, values)
			require.Greater(t, b.selects, 4, "read in pages")
			require.LessOrEqual(t, b.maxShard, 100/2, "a shard answers its share of a page")
		})
	}
}

// TestStreamedSelectTooDense: more points at one time than a shard may
// answer in a page is a clear error, 413 before anything was sent.
func TestStreamedSelectTooDense(t *testing.T) {
	b := &evalBackend{shards: []memShard{{}}}
	for i := range 50 {
		b.shards[0][fmt.Sprintf("m,host=h%02d#v", i)] = []models.SeriesPoint{{TS: 1, Value: 1}, {TS: 2, Value: 2}}
	}
	e := gin.New()
	h := New(Config{Backend: b, PagePoints: 10})
	h.Routes(e.Group("/"), e.Group("/"), e.Group("/"))
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/query?db=db&chunked=true&q="+url.QueryEscape("SELECT * FROM m"), nil))
	require.Equal(t, 413, w.Code)
	require.Contains(t, w.Body.String(), "more than a page of points at one time")
}

// goneWriter is a client that goes away once the first bytes arrive.
type goneWriter struct {
	*httptest.ResponseRecorder
	gone   context.CancelFunc
	b      *evalBackend
	before int // shard requests when the first bytes arrived
}

func (w *goneWriter) Write(b []byte) (int, error) {
	if w.before == 0 {
		w.before = w.b.selects
		w.gone()
	}
	return w.ResponseRecorder.Write(b)
}

// TestStreamedSelectClientGone: when the client goes away the statement
// stops reading pages: no shard request after the one whose page was
// being written, and the answer ends with the statement's error.
func TestStreamedSelectClientGone(t *testing.T) {
	b := streamBackend()
	e := gin.New()
	h := New(Config{Backend: b, PagePoints: 100})
	h.Routes(e.Group("/"), e.Group("/"), e.Group("/"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &goneWriter{ResponseRecorder: httptest.NewRecorder(), gone: cancel, b: b}
	req := httptest.NewRequest("GET", "/query?db=db&chunked=true&chunk_size=10&q="+url.QueryEscape("SELECT * FROM m"), nil)
	e.ServeHTTP(w, req.WithContext(ctx))
	require.Equal(t, 200, w.Code)
	require.Positive(t, w.before)
	require.Equal(t, w.before, b.selects, "no page read after the client left")
	require.Less(t, b.selects, 10)
	require.Contains(t, w.Body.String(), `"error":"context canceled"`)
}

// TestStreamedSelectLimit: LIMIT and OFFSET cut a raw select read page by
// page, chunked or not: the rows of the whole answer from OFFSET on, no
// more than LIMIT of them, read from the first pages only.
func TestStreamedSelectLimit(t *testing.T) {
	b := streamBackend()
	e := gin.New()
	h := New(Config{Backend: b, PagePoints: 100})
	h.Routes(e.Group("/"), e.Group("/"), e.Group("/"))
	get := func(q, params string) []chunkLine {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", "/query?db=db&epoch=ns&"+params+"&q="+url.QueryEscape(q), nil))
		require.Equal(t, 200, w.Code, w.Body.String())
		var lines []chunkLine
		for _, l := range strings.Split(strings.TrimSpace(w.Body.String()), "\n") {
			var c chunkLine
			require.NoError(t, json.Unmarshal([]byte(l), &c))
			lines = append(lines, c)
		}
		return lines
	}
	values := func(lines []chunkLine) [][]any {
		var out [][]any
		for _, l := range lines {
			for _, s := range l.Results[0].Series {
				out = append(out, s.Values...)
			}
		}
		return out
	}
	for _, order := range []string{"", " ORDER BY time DESC"} {
		whole := values(get("SELECT * FROM m"+order, ""))
		require.Len(t, whole, 2000)
		for _, c := range []struct{ limit, offset int }{{25, 0}, {7, 130}, {1, 1999}, {5, 2500}} {
			q := fmt.Sprintf("SELECT * FROM m%s LIMIT %d OFFSET %d", order, c.limit, c.offset)
			want := whole[min(c.offset, len(whole)):min(c.offset+c.limit, len(whole))]
			b.selects = 0
			got := values(get(q, ""))
			if len(want) == 0 {
				require.Empty(t, got, q)
			} else {
				require.Equal(t, want, got, q)
			}
			if c.offset+c.limit < 200 {
				require.Less(t, b.selects, 15, "%s: the first pages only", q)
			}
			got = values(get(q, "chunked=true&chunk_size=3"))
			if len(want) == 0 {
				require.Empty(t, got, q)
			} else {
				require.Equal(t, want, got, q)
			}
		}
	}
}
