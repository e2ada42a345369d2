package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cairn-db/cairn/models"
)

// fakeAPI is an in-memory stand-in for Cairn's /api/v1, just faithful enough
// to drive the console: placement is round-robin, and draining a node moves
// its replicas to the least-loaded other node, which joins out of sync.
type fakeAPI struct {
	mu        sync.Mutex
	token     string // when set, mutating calls need "Authorization: Bearer <token>"
	readToken string // when set, reads other than health and ready need it (or token)
	etcdDown  bool
	clusters  map[string][]string // cluster -> storage node ids
	draining  map[string]bool
	dbs       map[string]*fakeDB
	auths     []string // Authorization headers seen on mutating calls
	// operators and unreadable answer GET /operators, as the master's
	// persisted operators would.
	operators  []map[string]any
	unreadable []string
	// silent nodes are live but never answer a progress question;
	// progressFail, when set, is the message of a 400 to every one.
	silent       map[string]bool
	progressFail string
	progressAsks []string // the database of each progress question
	nodePolls    int      // GET /nodes: one per console poll
}

type fakeDB struct {
	Name           string         `json:"name"`
	StorageCluster string         `json:"storage_cluster"`
	NumShards      int            `json:"num_shards"`
	ReplicaFactor  int            `json:"replica_factor"`
	Options        map[string]any `json:"options"`
	shards         []*fakeShard
}

type fakeShard struct {
	ID       int      `json:"id"`
	Replicas []string `json:"replicas"`
	Leader   string   `json:"leader"`
	Term     int      `json:"term"`
	ISR      []string `json:"isr"`
	Status   string   `json:"status"`
	Reason   string   `json:"reason"`
	// txn overrides a replica's last txn id (else 100 + 10 x id).
	txn map[string]uint64
}

// progressView is a shard as ?progress=true shows it.
type progressView struct {
	*fakeShard
	Progress   map[string]models.ReplicaTxn `json:"progress"`
	Unanswered []string                     `json:"unanswered,omitempty"`
}

var fakeName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func newFakeAPI(nodes int) *fakeAPI {
	f := &fakeAPI{clusters: map[string][]string{}, draining: map[string]bool{}, dbs: map[string]*fakeDB{}, silent: map[string]bool{}}
	for i := 1; i <= nodes; i++ {
		f.clusters["default"] = append(f.clusters["default"], fmt.Sprintf("n-%d", i))
	}
	f.clusters["archive"] = []string{"a-1", "a-2"}
	return f
}

// addDB places a database the way the create endpoint does; tests use it to
// seed state without going through the browser.
func (f *fakeAPI) addDB(name, cluster string, shards, rf int) *fakeDB {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.placeLocked(name, cluster, shards, rf)
}

func (f *fakeAPI) placeLocked(name, cluster string, shards, rf int) *fakeDB {
	active := f.activeLocked(cluster)
	db := &fakeDB{Name: name, StorageCluster: cluster, NumShards: shards, ReplicaFactor: rf, Options: map[string]any{}}
	for i := range shards {
		s := &fakeShard{ID: i, Term: 1, Status: "online"}
		for k := range rf {
			s.Replicas = append(s.Replicas, active[(i+k)%len(active)])
		}
		s.Leader = s.Replicas[0]
		s.ISR = slices.Clone(s.Replicas)
		db.shards = append(db.shards, s)
	}
	f.dbs[name] = db
	return db
}

func (f *fakeAPI) activeLocked(cluster string) []string {
	var out []string
	for _, n := range f.clusters[cluster] {
		if !f.draining[n] {
			out = append(out, n)
		}
	}
	return out
}

func (f *fakeAPI) set(fn func(f *fakeAPI)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/health", f.locked(func(w http.ResponseWriter, r *http.Request) {
		reply(w, 200, map[string]any{"status": "ok", "node_id": "n-1", "roles": []string{"etcd", "master", "broker", "storage"}})
	}))
	mux.HandleFunc("GET /api/v1/ready", f.locked(func(w http.ResponseWriter, r *http.Request) {
		etcd := "up"
		if f.etcdDown {
			etcd = "down"
		}
		reply(w, 200, map[string]any{"ready": true, "from_backup": false, "etcd": etcd})
	}))
	mux.HandleFunc("GET /api/v1/master", f.locked(func(w http.ResponseWriter, r *http.Request) {
		reply(w, 200, map[string]any{"node_id": "n-1", "address": "127.0.0.1:9000", "term": 3,
			"elected_at": time.Now().Add(-5 * time.Minute).UnixMilli()})
	}))
	mux.HandleFunc("GET /api/v1/nodes", f.locked(func(w http.ResponseWriter, r *http.Request) {
		f.nodePolls++
		f.nodes(w, r)
	}))
	mux.HandleFunc("GET /api/v1/storage-clusters", f.locked(f.storageClusters))
	mux.HandleFunc("GET /api/v1/databases", f.locked(func(w http.ResponseWriter, r *http.Request) {
		list := []*fakeDB{}
		for _, db := range f.dbs {
			list = append(list, db)
		}
		reply(w, 200, map[string]any{"databases": list})
	}))
	mux.HandleFunc("GET /api/v1/databases/{name}/shards", f.locked(func(w http.ResponseWriter, r *http.Request) {
		db, ok := f.dbs[r.PathValue("name")]
		if !ok {
			fail(w, 404, "not_found", "database not found")
			return
		}
		switch r.URL.Query().Get("progress") {
		case "", "false":
			reply(w, 200, map[string]any{"shards": db.shards})
		case "true":
			f.progressAsks = append(f.progressAsks, db.Name)
			if f.progressFail != "" {
				fail(w, 400, "bad_request", f.progressFail)
				return
			}
			reply(w, 200, map[string]any{"shards": f.progressLocked(db)})
		default:
			fail(w, 400, "bad_request", "progress must be true or false")
		}
	}))
	mux.HandleFunc("GET /api/v1/operators", f.locked(func(w http.ResponseWriter, r *http.Request) {
		if f.etcdDown {
			fail(w, 503, "unavailable", "etcd unreachable; retry")
			return
		}
		ops, bad := f.operators, f.unreadable
		if ops == nil {
			ops = []map[string]any{}
		}
		if bad == nil {
			bad = []string{}
		}
		reply(w, 200, map[string]any{"operators": ops, "unreadable": bad})
	}))
	mux.HandleFunc("POST /api/v1/databases", f.mutating(f.createDB))
	mux.HandleFunc("DELETE /api/v1/databases/{name}", f.mutating(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := f.dbs[r.PathValue("name")]; !ok {
			fail(w, 404, "not_found", "database not found")
			return
		}
		delete(f.dbs, r.PathValue("name"))
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("POST /api/v1/nodes/{id}/drain", f.mutating(func(w http.ResponseWriter, r *http.Request) {
		f.drainLocked(r.PathValue("id"))
		reply(w, 202, map[string]any{"node_id": r.PathValue("id"), "draining": true})
	}))
	mux.HandleFunc("POST /api/v1/nodes/{id}/undrain", f.mutating(func(w http.ResponseWriter, r *http.Request) {
		delete(f.draining, r.PathValue("id"))
		reply(w, 200, map[string]any{"node_id": r.PathValue("id"), "draining": false})
	}))
	mux.HandleFunc("POST /api/v1/databases/{name}/shards/{id}/leader", f.mutating(f.transferLeader))
	return mux
}

func (f *fakeAPI) locked(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		probe := r.URL.Path == "/api/v1/health" || r.URL.Path == "/api/v1/ready"
		auth := r.Header.Get("Authorization")
		if f.readToken != "" && !probe && r.Method == http.MethodGet && auth != "Bearer "+f.readToken && auth != "Bearer "+f.token {
			fail(w, 401, "unauthorized", "this endpoint needs a read token")
			return
		}
		h(w, r)
	}
}

// mutating adds what every write shares: the admin token check and the 503
// while etcd is unreachable.
func (f *fakeAPI) mutating(h http.HandlerFunc) http.HandlerFunc {
	return f.locked(func(w http.ResponseWriter, r *http.Request) {
		f.auths = append(f.auths, r.Header.Get("Authorization"))
		if f.token != "" && r.Header.Get("Authorization") != "Bearer "+f.token {
			fail(w, 401, "unauthorized", "missing or invalid admin token")
			return
		}
		if f.etcdDown {
			fail(w, 503, "unavailable", "etcd unreachable; retry")
			return
		}
		h(w, r)
	})
}

func (f *fakeAPI) nodes(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	storage := map[string][]map[string]any{}
	for cluster, ids := range f.clusters {
		recs := []map[string]any{}
		for i, id := range ids {
			txn, following := map[string]int{}, map[string]string{}
			for _, db := range f.dbs {
				for _, s := range db.shards {
					key := fmt.Sprintf("%s/%d", db.Name, s.ID)
					if slices.Contains(s.Replicas, id) {
						txn[key] = 100 + s.ID
						if s.Leader != id {
							following[key] = s.Leader
						}
					}
				}
			}
			recs = append(recs, map[string]any{"node_id": id, "node_address": fmt.Sprintf("10.0.0.%d:9000", i+1),
				"role": "storage", "cluster": cluster, "draining": f.draining[id], "shards_hosted": len(txn), "following": following,
				"last_updated": now.Add(-time.Duration(300*i) * time.Millisecond).UnixMicro(),
				"labels":       map[string]string{"zone": string(rune('a' + i%3)), "rack": fmt.Sprintf("r%d", i)}, "weight": 1 + i%2})
		}
		storage[cluster] = recs
	}
	brokers := []map[string]any{
		{"node_id": "n-1", "address": "127.0.0.1:9000", "started_at": now.Add(-2 * time.Hour).UnixMilli()},
		{"node_id": "b-2", "address": "10.0.1.2:9000", "started_at": now.Add(-40 * time.Minute).UnixMilli()},
	}
	reply(w, 200, map[string]any{"brokers": brokers, "storage": storage})
}

// progressLocked answers as the broker does: every replica on a live node
// that is not silent answers its last txn id and the shard's term.
func (f *fakeAPI) progressLocked(db *fakeDB) []progressView {
	out := make([]progressView, 0, len(db.shards))
	for _, s := range db.shards {
		v := progressView{fakeShard: s, Progress: map[string]models.ReplicaTxn{}}
		for _, n := range s.Replicas {
			if f.silent[n] || !slices.Contains(f.clusters[db.StorageCluster], n) {
				v.Unanswered = append(v.Unanswered, n)
				continue
			}
			txn, ok := s.txn[n]
			if !ok {
				txn = uint64(100 + 10*s.ID)
			}
			v.Progress[n] = models.ReplicaTxn{LastTxnID: txn, LastTerm: uint64(s.Term), Term: int64(s.Term), SeenTerm: int64(s.Term)}
		}
		out = append(out, v)
	}
	return out
}

func (f *fakeAPI) storageClusters(w http.ResponseWriter, r *http.Request) {
	list := []map[string]any{}
	for name, ids := range f.clusters {
		shards := 0
		for _, db := range f.dbs {
			if db.StorageCluster == name {
				shards += db.NumShards
			}
		}
		list = append(list, map[string]any{"name": name, "etcd_endpoints": []string{}, "namespace": "",
			"live_nodes": len(ids), "shards": shards})
	}
	reply(w, 200, map[string]any{"storage_clusters": list})
}

func (f *fakeAPI) createDB(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name           string `json:"name"`
		StorageCluster string `json:"storage_cluster"`
		NumShards      int    `json:"num_shards"`
		ReplicaFactor  int    `json:"replica_factor"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, 400, "bad_request", "invalid JSON: "+err.Error())
		return
	}
	active := f.activeLocked(req.StorageCluster)
	switch {
	case !fakeName.MatchString(req.Name):
		fail(w, 400, "bad_request", "name must match [A-Za-z0-9_-]{1,64}")
	case f.dbs[req.Name] != nil:
		fail(w, 409, "already_exists", "database "+req.Name+" already exists")
	case f.clusters[req.StorageCluster] == nil:
		fail(w, 404, "not_found", "storage cluster "+req.StorageCluster+" not found")
	case req.NumShards < 1 || req.ReplicaFactor < 1:
		fail(w, 400, "bad_request", "num_shards and replica_factor must be at least 1")
	case req.ReplicaFactor > len(active):
		fail(w, 422, "unprocessable", fmt.Sprintf("replica factor %d exceeds the %d live storage nodes of cluster %s",
			req.ReplicaFactor, len(active), req.StorageCluster))
	default:
		reply(w, 201, f.placeLocked(req.Name, req.StorageCluster, req.NumShards, req.ReplicaFactor))
	}
}

// drainLocked moves every replica off node to the least-loaded active node
// that lacks one; the newcomer is out of sync until a real system would have
// copied the shard, which the console shows as a stale replica.
func (f *fakeAPI) drainLocked(node string) {
	f.draining[node] = true
	for _, db := range f.dbs {
		load := map[string]int{}
		for _, s := range db.shards {
			for _, n := range s.Replicas {
				load[n]++
			}
		}
		for _, s := range db.shards {
			i := slices.Index(s.Replicas, node)
			if i < 0 {
				continue
			}
			target := ""
			for _, n := range f.activeLocked(db.StorageCluster) {
				if !slices.Contains(s.Replicas, n) && (target == "" || load[n] < load[target]) {
					target = n
				}
			}
			if target == "" {
				continue // nowhere to go: the replica stays until a node joins
			}
			load[target]++
			s.Replicas[i] = target
			s.ISR = slices.DeleteFunc(s.ISR, func(n string) bool { return n == node })
			if s.Leader == node && len(s.ISR) > 0 {
				s.Leader = s.ISR[0]
				s.Term++
			}
		}
	}
}

func (f *fakeAPI) transferLeader(w http.ResponseWriter, r *http.Request) {
	db, ok := f.dbs[r.PathValue("name")]
	id, err := strconv.Atoi(r.PathValue("id"))
	if !ok || err != nil || id < 0 || id >= len(db.shards) {
		fail(w, 404, "not_found", "shard not found")
		return
	}
	var req struct {
		NodeID string `json:"node_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, 400, "bad_request", "invalid JSON")
		return
	}
	s := db.shards[id]
	if !slices.Contains(s.ISR, req.NodeID) {
		fail(w, 422, "unprocessable", req.NodeID+" is not an in-sync replica of the shard")
		return
	}
	s.Leader = req.NodeID
	s.Term++
	reply(w, 200, s)
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	reply(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}
