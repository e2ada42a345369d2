package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRetentionStopsAnsweringAtOnce: points written before a retention was
// set (6 hours of them) stop being answered the moment the database gets
// `retention: 2h`, through InfluxQL (raw, count, GROUP BY time) and the
// REST query API; lifting the retention (0) answers them again, since the
// shards have not reclaimed them.
func TestRetentionStopsAnsweringAtOnce(t *testing.T) {
	p := start(t, standaloneArgs(t)...)
	p.waitStatus("/api/v1/ready", 200, 15*time.Second)
	code, out := p.post("/api/v1/databases", map[string]any{"name": "ret", "num_shards": 2, "replica_factor": 1})
	require.Equal(t, http.StatusCreated, code, out)

	now := time.Now().Truncate(time.Minute)
	var lines strings.Builder
	for i := range 36 { // every 10 minutes over 6 hours
		fmt.Fprintf(&lines, "cpu,host=h%d value=%d %d\n", i%3, i, now.Add(-time.Duration(i)*10*time.Minute).UnixNano())
	}
	resp, err := http.Post("http://"+p.addr+"/write?db=ret", "text/plain", bytes.NewBufferString(lines.String()))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	count := func() string {
		res := influxQuery(t, p.addr, "ret", "", `SELECT count("value") FROM "cpu" WHERE time > now() - 7h`)
		require.Empty(t, res.Results[0].Error)
		if len(res.Results[0].Series) == 0 {
			return "0"
		}
		return fmt.Sprint(res.Results[0].Series[0].Values[0][1])
	}
	require.Equal(t, "36", count())

	code, out = p.send(http.MethodPatch, "/api/v1/databases/ret", map[string]any{"retention": "2h"}, "")
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "2h", out["retention"], "%v", out)
	// Points at now-0 .. now-110 min are inside 2 h: 12 of them.
	got := ""
	assert.Eventually(t, func() bool { got = count(); return got == "12" }, 10*time.Second, 50*time.Millisecond,
		"only the last 2 hours are answered once the retention is set")
	require.Equal(t, "12", got)
	raw := influxQuery(t, p.addr, "ret", "", `SELECT "value" FROM "cpu" WHERE time > now() - 7h`)
	require.Len(t, raw.Results[0].Series[0].Values, 12)
	cutoff := now.Add(-2 * time.Hour)
	for _, v := range raw.Results[0].Series[0].Values {
		ns, err := v[0].(json.Number).Int64() // epoch=ns
		require.NoError(t, err)
		require.Greater(t, ns, cutoff.UnixNano(), "%s is older than the retention", time.Unix(0, ns).UTC())
	}
	grouped := influxQuery(t, p.addr, "ret", "", `SELECT count("value") FROM "cpu" WHERE time > now() - 7h GROUP BY time(1h) fill(none)`)
	var total float64
	for _, v := range grouped.Results[0].Series[0].Values {
		n, err := v[1].(json.Number).Float64()
		require.NoError(t, err)
		total += n
	}
	require.Equal(t, 12.0, total)

	// The REST query API answers the same range.
	var rest dataQueryResult
	require.Equal(t, http.StatusOK, getDataJSON(p, fmt.Sprintf("/api/v1/query?db=ret&metric=cpu&start=%d&end=%d",
		now.Add(-7*time.Hour).UnixNano(), now.Add(time.Minute).UnixNano()), &rest))
	n := 0
	for _, s := range rest.Series {
		n += len(s.Points)
		for _, pt := range s.Points {
			ts, err := pt[0].Int64()
			require.NoError(t, err)
			require.Greater(t, ts, cutoff.UnixNano(), "the REST API answered a point older than the retention")
		}
	}
	require.Equal(t, 12, n)

	// Lifted: the shards still hold the rest, so it is answered again.
	code, out = p.send(http.MethodPatch, "/api/v1/databases/ret", map[string]any{"retention": "0"}, "")
	require.Equal(t, http.StatusOK, code, out)
	require.Eventually(t, func() bool { return count() == "36" }, 10*time.Second, 50*time.Millisecond)
}

// TestRetentionGivesSpaceBack: 6 hours of points that do not compress,
// then `retention: 2h` with 1 h partitions: within a few expiry passes (--retention-check-interval
// 1s here) the shard files shrink by most of the expired share, the node
// logs what it expired, and the last 2 hours are all still answered.
func TestRetentionGivesSpaceBack(t *testing.T) {
	p, dataDir := startExpiringStandalone(t)
	code, out := p.post("/api/v1/databases", map[string]any{"name": "big", "num_shards": 1, "replica_factor": 1})
	require.Equal(t, http.StatusCreated, code, out)

	now := time.Now().Truncate(time.Second)
	rnd := rand.New(rand.NewPCG(3, 4))
	const series, step = 20, time.Second
	var lines strings.Builder
	flush := func() {
		resp, err := http.Post("http://"+p.addr+"/write?db=big", "text/plain", strings.NewReader(lines.String()))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		lines.Reset()
	}
	n := 0
	for ts := now.Add(-6 * time.Hour); !ts.After(now); ts = ts.Add(step) {
		for s := range series {
			fmt.Fprintf(&lines, "m,s=%d v=%v %d\n", s, rnd.Float64(), ts.UnixNano())
			n++
		}
		if n%50_000 == 0 {
			flush()
		}
	}
	flush()

	shardBytes := func() int64 { return shardFileBytes(t, dataDir) }
	count := func() int64 { return countV(t, p.addr, "big") }
	require.Equal(t, int64(n), count())
	// The points reach blocks at the memtable's next flush (10 s idle).
	before := int64(0)
	require.Eventually(t, func() bool { before = shardBytes(); return before > 3<<20 }, 30*time.Second, 200*time.Millisecond,
		"the points never reached the shard file (%d bytes)", before)

	code, out = p.send(http.MethodPatch, "/api/v1/databases/big", map[string]any{"retention": "2h", "partition": "1h"}, "")
	require.Equal(t, http.StatusOK, code, out)
	expiryAsked := time.Now()
	kept := int64(0)
	for ts := now.Add(-6 * time.Hour); !ts.After(now); ts = ts.Add(step) {
		if ts.After(now.Add(-2 * time.Hour)) {
			kept += series
		}
	}
	require.Eventually(t, func() bool { return count() <= kept }, 10*time.Second, 50*time.Millisecond)
	// The node logs each expiry with the block bytes it dropped; the files
	// shrink by at least that much once the file is rewritten.
	expired := func() (total int64) {
		logged, err := os.ReadFile(p.log)
		require.NoError(t, err)
		for _, line := range strings.Split(string(logged), "\n") {
			var rec struct {
				Msg   string `json:"msg"`
				Bytes int64  `json:"bytes"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "expired points past the retention" {
				total += rec.Bytes
			}
		}
		return total
	}
	var after int64
	assert.Eventually(t, func() bool {
		after = shardBytes()
		return expired() > 0 && before-after >= expired()
	}, 60*time.Second, 200*time.Millisecond)
	require.Positive(t, expired(), "no expiry logged")
	require.GreaterOrEqual(t, before-after, expired(), "the shard files shrank less than the expired blocks")
	require.Less(t, time.Since(expiryAsked), time.Hour, "space given back later than one partition length")
	t.Logf("shard files: %d bytes before the expiry, %d after; %d bytes of blocks expired; %d points kept of %d", before, after, expired(), kept, n)
	keptNow := int64(0) // the retention's cutoff moved on since
	cut := time.Now().Add(-2 * time.Hour)
	for ts := now.Add(-6 * time.Hour); !ts.After(now); ts = ts.Add(step) {
		if ts.After(cut) {
			keptNow += series
		}
	}
	require.InDelta(t, keptNow, count(), 2*series, "the last 2 hours are all answered")
}

// TestRetentionFollowerAwayExpiresOnReturn: RF 3; a follower is down while
// a retention of 2h is set and the others expire 6 hours of points; it
// returns, expires the same points by its own clock, and once it leads,
// lifting the retention brings back none of what expired (only the points
// of blocks that straddled the cutoff, at most one block per series).
func TestRetentionFollowerAwayExpiresOnReturn(t *testing.T) {
	c := startDataCluster(t, dataClusterOpts{storageNodes: 3, shards: 1, rf: 3,
		nodeArgs: func(int) []string { return []string{"--retention-check-interval", "1s"} }})
	now := time.Now().Truncate(time.Second)
	const series = 2
	var lines strings.Builder
	total := 0
	for ts := now.Add(-6 * time.Hour); !ts.After(now); ts = ts.Add(time.Second) {
		for s := range series {
			fmt.Fprintf(&lines, "m,s=%d v=%d %d\n", s, ts.Unix(), ts.UnixNano())
			total++
		}
	}
	resp, err := http.Post("http://"+c.broker.addr+"/write?db=db", "text/plain", strings.NewReader(lines.String()))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)

	count := func() int64 {
		res := influxQuery(t, c.broker.addr, "db", "", `SELECT count("v") FROM "m" WHERE time > now() - 7h`)
		if res.Results[0].Error != "" || len(res.Results[0].Series) == 0 {
			return -1
		}
		n, err := res.Results[0].Series[0].Values[0][1].(json.Number).Int64()
		require.NoError(t, err)
		return n
	}
	require.Equal(t, int64(total), count())
	expiries := func(p *Proc) int {
		logged, err := os.ReadFile(p.log)
		require.NoError(t, err)
		return strings.Count(string(logged), "expired points past the retention")
	}

	shard := c.shardsOf()[0]
	var away *Proc
	var awayID string
	for i, id := range c.ids {
		if id != shard.Leader {
			away, awayID = c.storage[i], id
			break
		}
	}
	away.kill9()
	code, out := c.broker.send(http.MethodPatch, "/api/v1/databases/db", map[string]any{"retention": "2h"}, "")
	require.Equal(t, http.StatusOK, code, out)
	// The others flush (10 s idle) and expire.
	for i, id := range c.ids {
		if id != awayID {
			p := c.storage[i]
			require.Eventually(t, func() bool { return expiries(p) > 0 }, 60*time.Second, 200*time.Millisecond, "%s never expired", id)
		}
	}

	before := expiries(away)
	away.restart()
	c.waitHealthy(60 * time.Second)
	require.Eventually(t, func() bool { return expiries(away) > before }, 60*time.Second, 200*time.Millisecond,
		"the returning follower never expired its own copy")
	// Back, every replica speaks the protocol of sealed partitions: the
	// returning follower seals its old hours and drops the expired ones
	// whole; at most the partition holding the cutoff (and the one after,
	// at an hour's turn) stays.
	require.Eventually(t, func() bool {
		logged, err := os.ReadFile(away.log)
		require.NoError(t, err)
		return strings.Contains(string(logged), "sealed time partitions")
	}, 60*time.Second, 200*time.Millisecond, "the returning follower never sealed")
	require.Eventually(t, func() bool { return len(partitionFiles(shardFiles(t, dataDirOf(away)))) <= 2 }, 30*time.Second, 200*time.Millisecond,
		"the returning follower kept expired partition files: %v", partitionFiles(shardFiles(t, dataDirOf(away))))
	for _, s := range c.shardsOf() {
		if s.Leader != awayID {
			code, body := c.broker.post(fmt.Sprintf("/api/v1/databases/db/shards/%d/leader", s.ID), map[string]any{"node_id": awayID})
			require.Equal(t, http.StatusAccepted, code, "%v", body)
		}
	}
	require.Eventually(t, func() bool { return c.shardsOf()[0].Leader == awayID }, 30*time.Second, 50*time.Millisecond)

	// Lifted: what the returning follower (now the leader) answers is what
	// it kept; the expired hours do not come back.
	code, out = c.broker.send(http.MethodPatch, "/api/v1/databases/db", map[string]any{"retention": "0"}, "")
	require.Equal(t, http.StatusOK, code, out)
	kept := 2 * 3600 * series
	// At most one block per series holds points on both sides of the
	// cutoff, and one sealed partition (1 h) whose newest points are
	// newer than it stays whole.
	straddle := 1024*series + 3600*series
	var got int64
	require.Eventually(t, func() bool { got = count(); return got >= 0 }, 10*time.Second, 50*time.Millisecond)
	require.LessOrEqual(t, got, int64(kept+straddle+series*120), "expired points came back after the follower returned")
	require.GreaterOrEqual(t, got, int64(kept-series*120), "kept points are missing")
	t.Logf("%d points written over 6 h; the returning follower leads and answers %d with the retention lifted (2 h = %d)", total, got, kept)
}

// TestRetentionDropsPartitionFiles: a database with 1 h partitions holding
// 6 h of points seals its old hours into files of their own; once its
// retention is 2 h it answers only the last 2 h, the files of the expired
// partitions are gone, and its data dir shrank by at least their size.
func TestRetentionDropsPartitionFiles(t *testing.T) {
	p, dataDir := startExpiringStandalone(t)
	code, out := p.post("/api/v1/databases", map[string]any{"name": "parts", "num_shards": 1, "replica_factor": 1,
		"retention": "1d", "partition": "1h"})
	require.Equal(t, http.StatusCreated, code, out)

	now := time.Now().Truncate(time.Second)
	const series, step = 5, 2 * time.Second
	var lines strings.Builder
	n := 0
	for ts := now.Add(-6 * time.Hour); !ts.After(now); ts = ts.Add(step) {
		for s := range series {
			fmt.Fprintf(&lines, "m,s=%d v=%d %d\n", s, ts.Unix(), ts.UnixNano())
			n++
		}
	}
	writeOnceKnown(t, p.addr, "parts", lines.String())
	count := func() int64 { return countV(t, p.addr, "parts") }
	require.Equal(t, int64(n), count())

	// Flushed (10 s idle), then sealed: the hours that ended an hour ago.
	var sealed map[string]int64
	require.Eventually(t, func() bool { sealed = partitionFiles(shardFiles(t, dataDir)); return len(sealed) >= 4 }, 60*time.Second, 200*time.Millisecond,
		"the old hours were never sealed: %v", shardFiles(t, dataDir))
	require.Equal(t, int64(n), count(), "sealing changed no answer")
	before := shardFiles(t, dataDir)

	code, out = p.send(http.MethodPatch, "/api/v1/databases/parts", map[string]any{"retention": "2h"}, "")
	require.Equal(t, http.StatusOK, code, out)
	var gone []string
	var goneBytes int64
	require.Eventually(t, func() bool {
		now := shardFiles(t, dataDir)
		gone, goneBytes = nil, 0
		for path, size := range partitionFiles(before) {
			if _, ok := now[path]; !ok {
				gone, goneBytes = append(gone, path), goneBytes+size
			}
		}
		return len(gone) >= 3 && len(partitionFiles(now)) <= 2
	}, 30*time.Second, 200*time.Millisecond, "the expired partitions' files are still there: %v", shardFiles(t, dataDir))
	after := shardFiles(t, dataDir)
	var beforeBytes, afterBytes int64
	for _, size := range before {
		beforeBytes += size
	}
	for path, size := range after {
		if _, old := before[path]; old || !strings.Contains(path, ".db.p") {
			afterBytes += size // a partition sealed since (an hour turned) moved bytes within the dir
		}
	}
	// The shard's other files may grow a page or two meanwhile (its log, its
	// index: 8 KiB in one CI run, against 92 KiB expired), but the expired
	// data must not have moved into them.
	require.GreaterOrEqual(t, beforeBytes-afterBytes, goneBytes*3/4, "the data dir shrank much less than the expired partitions' files: before %v, after %v", before, after)
	t.Logf("%d partition files sealed; %d expired (%d bytes); shard files %d bytes before, %d after", len(sealed), len(gone), goneBytes, beforeBytes, afterBytes)

	kept := int64(0)
	cut := time.Now().Add(-2 * time.Hour)
	for ts := now.Add(-6 * time.Hour); !ts.After(now); ts = ts.Add(step) {
		if ts.After(cut) {
			kept += series
		}
	}
	require.InDelta(t, kept, count(), 5*series, "only the last 2 hours, all of them, are answered")
}

// dataDirOf is the --data-dir a process was started with.
func dataDirOf(p *Proc) string {
	for i, a := range p.args {
		if a == "--data-dir" && i+1 < len(p.args) {
			return p.args[i+1]
		}
	}
	return ""
}
