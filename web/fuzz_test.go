package web_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cairn-db/cairn/web"
)

// FuzzAPIBodies (issue 26): any JSON DDL body, through the real handlers
// (decoding, strict fields, the content-type check), answers a 2xx or 4xx,
// never a panic or a 5xx.
func FuzzAPIBodies(f *testing.F) {
	for _, b := range []string{
		`{"name":"db","storage_cluster":"default","num_shards":4,"replica_factor":3,"retention":"30d","rollups":[{"interval":"5m","retention":"90d"}],"options":{"a":"b"}}`,
		`{"name":"c","etcd_endpoints":["http://x:2379"],"namespace":"/n","failure_domain":"zone"}`,
		`{"num_shards":-1}`, `{"node_id":"n1"}`, `[]`, `null`, `{"name":"a"}{"name":"b"}`, `{"name":1e999}`,
	} {
		f.Add(b, uint8(0))
	}
	paths := []struct{ method, path string }{
		{"POST", "/api/v1/databases"}, {"POST", "/api/v1/storage-clusters"}, {"PATCH", "/api/v1/databases/db"},
		{"POST", "/api/v1/databases/db/shards/0/leader"}, {"POST", "/api/v1/rebalance"},
	}
	h := web.New(web.Config{State: newState(f), Broker: testBroker{admin: &fakeAdmin{}, data: &fakeData{}}, MaxBodyBytes: 1 << 16}).Handler()
	f.Fuzz(func(t *testing.T, body string, route uint8) {
		p := paths[int(route)%len(paths)]
		req := httptest.NewRequest(p.method, p.path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("%s %s %q: %d %s", p.method, p.path, body, w.Code, w.Body.String())
		}
	})
}

// FuzzQueryParams (issue 26): any query string on the read API answers a
// 2xx or 4xx, never a panic or a 5xx.
func FuzzQueryParams(f *testing.F) {
	for _, q := range []string{
		"db=x&metric=m&start=0&end=10&tag=host:a",
		"db=x&metric=m&start=2026-01-01T00:00:00Z&end=2026-01-02T00:00:00.5Z&tag=:&tag=a",
		"db=&metric=&start=-9223372036854775808&end=9223372036854775807",
		"db=x&series=cpu,host=a", "%zz&&==;", "progress=maybe",
	} {
		f.Add(q, uint8(0))
	}
	paths := []string{"/api/v1/query", "/api/v1/route", "/api/v1/databases/db/shards", "/api/v1/explore", "/api/v1/history"}
	h := web.New(web.Config{State: newState(f), Broker: testBroker{admin: &fakeAdmin{}, data: &fakeData{}}}).Handler()
	f.Fuzz(func(t *testing.T, query string, route uint8) {
		u := paths[int(route)%len(paths)] + "?" + query
		req, err := http.NewRequest("GET", "http://node"+strings.ReplaceAll(u, " ", "%20"), nil)
		if err != nil {
			return // not a request any client can send
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 500 {
			t.Fatalf("GET %s: %d %s", u, w.Code, w.Body.String())
		}
	})
}
