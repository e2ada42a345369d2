package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkWritable writes, through each broker, one point to every shard (a
// series per shard found with the route API) and wants 204 within a minute.
func (c *nemCluster) checkWritable(t *testing.T) {
	var lines []string
	covered := map[float64]bool{}
	for i := 0; i < 1000 && len(covered) < nemShards; i++ {
		key := fmt.Sprintf("nemfinal,k=%d", i)
		code, r := c.m0.get("/api/v1/route?db=" + nemDB + "&series=" + key)
		if code != 200 {
			continue
		}
		shard, _ := r["shard"].(float64)
		if !covered[shard] {
			covered[shard] = true
			lines = append(lines, fmt.Sprintf("nemfinal,k=%d value=1 %d", i, dataBase))
		}
	}
	if len(covered) < nemShards {
		t.Errorf("CHECK every shard writable: FAILED: the route API covered only %d of %d shards", len(covered), nemShards)
		return
	}
	body := []byte(strings.Join(lines, "\n") + "\n")
	hc := &http.Client{Timeout: 20 * time.Second}
	for _, b := range []*Proc{c.m0, c.m1} {
		var status int
		var msg string
		ok := eventually(func() bool {
			var err error
			status, msg, err = postData(hc, fmt.Sprintf("http://%s/api/v1/write?db=%s", b.addr, nemDB), body)
			if err != nil {
				msg = err.Error()
			}
			return err == nil && status == http.StatusNoContent
		}, time.Minute, 250*time.Millisecond)
		if !ok {
			t.Errorf("CHECK every shard writable: FAILED through %s: a write touching all %d shards still answered %d %s a minute after healing",
				b.name, nemShards, status, msg)
		} else {
			c.logf("check: every shard writable through %s", b.name)
		}
	}
}

// nemQueryWindow is how many point numbers one verification query covers.
const nemQueryWindow = 20_000

// checkPoints reads back every number each writer used, in windows, through
// broker m0, and checks every acknowledged point is there exactly once with
// its value; no point, acknowledged or not, may appear twice.
func (c *nemCluster) checkPoints(t *testing.T, writers []*nemWriter) {
	type seen struct {
		count  int
		value  float64
		series string
	}
	var missing, wrong, dups []int64
	var lostFrom, lostTo time.Time // when the batches of missing points were sent
	checked := 0
	for wi, w := range writers {
		batches, _, next := w.result()
		first := int64(wi) * nemWriterSpan
		got := map[int64]*seen{}
		for lo := first; lo < next; lo += nemQueryWindow {
			hi := min(lo+nemQueryWindow, next) - 1
			var res dataQueryResult
			path := fmt.Sprintf("/api/v1/query?db=%s&metric=%s&start=%d&end=%d", nemDB, nemMetric, dataBase+lo, dataBase+hi)
			var code int
			if !eventually(func() bool {
				res = dataQueryResult{}
				code = getDataJSON(c.m0, path, &res)
				return code == 200
			}, time.Minute, 200*time.Millisecond) {
				t.Errorf("CHECK acknowledged points present exactly once: FAILED: query %s never answered 200 (last %d)", path, code)
				return
			}
			for _, s := range res.Series {
				for _, p := range s.Points {
					ts, err := p[0].Int64()
					if err != nil {
						t.Errorf("CHECK acknowledged points: bad timestamp %q in series %v", p[0], s.Tags)
						continue
					}
					n := ts - dataBase
					e := got[n]
					if e == nil {
						e = &seen{}
						got[n] = e
					}
					e.count++
					e.value, _ = p[1].Float64()
					e.series = s.Tags["s"]
				}
			}
		}
		for n, e := range got {
			if e.count > 1 {
				dups = append(dups, n)
			}
		}
		for _, b := range batches {
			for i := b.first; i < b.first+int64(b.n); i++ {
				checked++
				e := got[i]
				switch {
				case e == nil:
					missing = append(missing, i)
					lostFrom, lostTo = minTime(lostFrom, b.start), maxTime(lostTo, b.end)
				case e.value != float64(i) || e.series != "s"+strconv.FormatInt(i%nemSeries, 10):
					wrong = append(wrong, i)
				}
			}
		}
	}
	label := func(list []int64) string {
		slices.Sort(list)
		var out []string
		for _, n := range list[:min(len(list), 10)] {
			out = append(out, seqLabel(n))
		}
		return strings.Join(out, " ")
	}
	ok := true
	if len(missing) > 0 {
		ok = false
		t.Errorf("CHECK acknowledged points present: FAILED: %d of %d acknowledged points missing (%d acknowledged batches, sent between +%.1fs and +%.1fs; missing per shard: %s); first: %s",
			len(missing), checked, batchesTouched(missing), lostFrom.Sub(c.begin).Seconds(), lostTo.Sub(c.begin).Seconds(),
			c.perShard(missing), label(missing))
	}
	if len(wrong) > 0 {
		ok = false
		t.Errorf("CHECK acknowledged points intact: FAILED: %d acknowledged points have another value or series; first: %s", len(wrong), label(wrong))
	}
	if len(dups) > 0 {
		ok = false
		t.Errorf("CHECK points present at most once: FAILED: %d points read back more than once; first: %s", len(dups), label(dups))
	}
	if checked == 0 {
		ok = false
		t.Errorf("CHECK acknowledged points: FAILED: no batch was acknowledged during the whole run")
	}
	if ok {
		c.logf("check: all %d acknowledged points present exactly once", checked)
	}
}

// perShard counts point numbers by the shard their series routes to.
func (c *nemCluster) perShard(nums []int64) string {
	bySeries := map[int64]int{}
	for _, n := range nums {
		bySeries[n%nemSeries]++
	}
	byShard := map[string]int{}
	for sr, n := range bySeries {
		code, r := c.m0.get(fmt.Sprintf("/api/v1/route?db=%s&series=%s,s=s%d", nemDB, nemMetric, sr))
		shard := "?"
		if code == 200 {
			shard = fmt.Sprint(r["shard"])
		}
		byShard["shard "+shard] += n
	}
	keys := make([]string, 0, len(byShard))
	for k := range byShard {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s: %d", k, byShard[k]))
	}
	return strings.Join(out, ", ")
}

// batchesTouched counts the distinct batches the numbers belong to.
func batchesTouched(nums []int64) int {
	set := map[int64]bool{}
	for _, n := range nums {
		set[n/nemPerPost] = true
	}
	return len(set)
}

func minTime(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
