package simcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/cairn-db/cairn/models"
	"go.uber.org/zap"
)

// masterSeesAll waits until the etcd,master,broker process lists every
// agent as a live node of the cluster (GET /api/v1/nodes, polled every
// 200ms): the databases are created only once the master places on all.
func (c *cluster) masterSeesAll(ctx context.Context) error {
	client := &http.Client{Timeout: 10 * time.Second}
	seen := func() int {
		resp, err := client.Get(c.api + "/api/v1/nodes")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var body struct {
			Storage map[string][]json.RawMessage `json:"storage"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
			return -1
		}
		return len(body.Storage["default"])
	}
	deadline := time.Now().Add(5 * time.Minute)
	for n := seen(); n != c.p.Nodes; n = seen() {
		if time.Now().After(deadline) {
			return fmt.Errorf("simulate cluster: the master lists %d of %d agents after 5m", n, c.p.Nodes)
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// Watch is what the failover observer (`cairn simulate observe`, a process
// of its own) is asked to watch in etcd: the killed nodes' records, and the
// shard states and in-sync sets of the shards they led.
type Watch struct {
	Etcd string `json:"etcd"`
	// The key prefixes of the live storage nodes, the shard states and
	// the in-sync sets (a shard's set is ISR + its models.ShardID).
	Nodes  string   `json:"nodes"`
	States string   `json:"states"`
	ISR    string   `json:"isr"`
	Dead   []string `json:"dead"`   // the killed nodes
	Shards []string `json:"shards"` // the shards they led (models.ShardID)
}

// The observer's lines on its standard output, each with the Unix time in
// nanoseconds at which it saw the event in etcd.
const (
	lineReady    = "ready"    // listed and watching: the kill may start
	lineGone     = "gone"     // the last killed node's record is deleted: the leases' end
	lineLed      = "led"      // every shard online under a leader not killed
	lineWritable = "writable" // and each new leader published its in-sync set at its term
	lineLeft     = "left"     // each second: shards not led yet, new leaders without their set
	// Half and nine in ten of the new leaders writable (whether the last
	// ones are a long tail or all come late).
	lineHalf = "half"
	lineMost = "most"
)

// Observe is the failover observer: it reads a Watch as JSON from in, lists
// and watches its keys, and writes its lines to out, until every shard is
// writable (then it returns nil) or ctx ends. It runs in a process of its
// own, away from the agents' busy scheduler, whose watch saw the new leaders
// seconds after etcd had them; its own times are the same clock for the
// leases' end and the new leaders, so its lag, if any, cancels out.
func Observe(ctx context.Context, in io.Reader, out io.Writer) error {
	var w Watch
	if err := json.NewDecoder(in).Decode(&w); err != nil {
		return fmt.Errorf("simulate observe: reading what to watch: %w", err)
	}
	store, err := kv.NewEtcdStore(kv.EtcdConfig{Endpoints: []string{w.Etcd}, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer store.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	o := newObserved(w)
	type batch struct {
		prefix string
		resp   kv.RawWatchResponse
	}
	events := make(chan batch, 64)
	for _, prefix := range []string{w.Nodes, w.States, w.ISR} {
		kvs, rev, err := store.List(ctx, prefix)
		if err != nil {
			return fmt.Errorf("simulate observe: listing %s: %w", prefix, err)
		}
		for _, x := range kvs {
			o.apply(prefix, kv.RawEvent{Type: kv.EventPut, KV: x})
		}
		ch := store.Watch(ctx, prefix, rev+1)
		go func() {
			for resp := range ch {
				select {
				case events <- batch{prefix, resp}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	bw := bufio.NewWriter(out)
	say := func(line string) error {
		if _, err := bw.WriteString(line + "\n"); err != nil {
			return err
		}
		return bw.Flush()
	}
	if err := say(lineReady); err != nil {
		return err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var gone, led, half, most bool
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := say(fmt.Sprintf("%s %d %d", lineLeft, o.leftLed(), len(o.waitISR))); err != nil {
				return err
			}
			continue
		case b := <-events:
			if b.resp.Err != nil {
				return fmt.Errorf("simulate observe: watching %s: %w", b.prefix, b.resp.Err)
			}
			for _, ev := range b.resp.Events {
				o.apply(b.prefix, ev)
			}
		}
		now := strconv.FormatInt(time.Now().UnixNano(), 10)
		if !gone && len(o.alive) == 0 {
			gone = true
			if err := say(lineGone + " " + now); err != nil {
				return err
			}
		}
		if gone && !led && o.led() {
			led = true
			if err := say(lineLed + " " + now); err != nil {
				return err
			}
		}
		done := led && o.writable()
		for _, m := range []struct {
			seen *bool
			line string
			left int // at most this many shards without their set
		}{{&half, lineHalf, len(w.Shards) / 2}, {&most, lineMost, len(w.Shards) / 10}} {
			if led && !*m.seen && len(o.waitISR) <= m.left {
				*m.seen = true
				if err := say(m.line + " " + now); err != nil {
					return err
				}
			}
		}
		if done {
			return say(lineWritable + " " + now)
		}
	}
}

// observed is the observer's view of the keys it watches.
type observed struct {
	w      Watch
	dead   map[string]bool
	alive  map[string]bool // killed nodes whose records are still there
	states map[string]models.ShardStates
	isr    map[string]models.ISR // by models.ShardID
	// The watched shards not led yet, and (once all are) those whose new
	// leader has not published its set; nil until their first look.
	waitLed, waitISR map[string]bool
	// shardsOf lists the watched shards of each database; touched the
	// watched shards whose state or set changed since the last look. A
	// look checks only those (every waiting shard at its first): checking
	// every waiting shard after each watch answer cost the observer
	// 10,688 checks per answer when a domain died at 1,000 simulated
	// nodes, tens of thousands of answers (the live leaders' drops, the
	// first sets), and its view trailed etcd by ~15 s: that lag, not the
	// agents', was most of the "writable" figure.
	shardsOf map[string][]string
	touched  map[string]bool
	// looked counts the shards looks checked (the cost test).
	looked int
}

func newObserved(w Watch) *observed {
	o := &observed{w: w, dead: map[string]bool{}, alive: map[string]bool{}, states: map[string]models.ShardStates{},
		isr: map[string]models.ISR{}, shardsOf: map[string][]string{}, touched: map[string]bool{}}
	for _, id := range w.Dead {
		o.dead[id] = true
	}
	for _, id := range w.Shards {
		if db, _, err := models.ParseShardID(id); err == nil {
			o.shardsOf[db] = append(o.shardsOf[db], id)
		}
	}
	return o
}

// leftLed is how many watched shards are not led yet (every one before the
// first look).
func (o *observed) leftLed() int {
	if o.waitLed == nil {
		return len(o.w.Shards)
	}
	return len(o.waitLed)
}

// waiting is every watched shard, as a set.
func (o *observed) waiting() map[string]bool {
	m := make(map[string]bool, len(o.w.Shards))
	for _, id := range o.w.Shards {
		m[id] = true
	}
	return m
}

// settle drops from wait (nil: every watched shard, at its first look,
// which checks them all) the shards done says are done, looking only at
// those touched since the last look otherwise; it returns the set.
func (o *observed) settle(wait map[string]bool, done func(id string) bool) map[string]bool {
	check := o.touched
	if wait == nil {
		wait = o.waiting()
		check = wait
	}
	for id := range check {
		if !wait[id] {
			continue
		}
		o.looked++
		if done(id) {
			delete(wait, id)
		}
	}
	return wait
}

func (o *observed) apply(prefix string, ev kv.RawEvent) {
	name := strings.TrimPrefix(ev.KV.Key, prefix)
	put := ev.Type == kv.EventPut
	switch prefix {
	case o.w.Nodes:
		if o.dead[name] {
			if put {
				o.alive[name] = true
			} else {
				delete(o.alive, name)
			}
		}
	case o.w.States:
		for _, id := range o.shardsOf[name] {
			o.touched[id] = true
		}
		var ss models.ShardStates
		if !put || json.Unmarshal(ev.KV.Value, &ss) != nil {
			delete(o.states, name)
			return
		}
		o.states[name] = ss
	case o.w.ISR:
		o.touched[name] = true // a shard not watched is never waited for
		var set models.ISR
		if !put || json.Unmarshal(ev.KV.Value, &set) != nil {
			delete(o.isr, name)
			return
		}
		o.isr[name] = set
	}
}

// newLeader is shard id's state in states (by database), and whether it is
// online under a leader not in dead.
func newLeader(states func(db string) models.ShardStates, dead map[string]bool, id string) (models.ShardState, bool) {
	db, shard, err := models.ParseShardID(id)
	if err != nil {
		return models.ShardState{}, false
	}
	for _, s := range states(db).Shards {
		if s.ID == shard {
			return s, s.Status == models.StatusOnline && !dead[s.Leader]
		}
	}
	return models.ShardState{}, false
}

func (o *observed) newLeader(id string) (models.ShardState, bool) {
	return newLeader(func(db string) models.ShardStates { return o.states[db] }, o.dead, id)
}

// led drops the shards now online under a leader not killed; true once
// none is left (the shards then wait for their new leaders' sets).
func (o *observed) led() bool {
	o.waitLed = o.settle(o.waitLed, func(id string) bool {
		_, ok := o.newLeader(id)
		return ok
	})
	if len(o.waitLed) > 0 {
		clear(o.touched) // looked at; writable's first look takes every shard
		return false
	}
	return true
}

// writable drops the shards whose new leader published its in-sync set at
// its term; true once none is left.
func (o *observed) writable() bool {
	o.waitISR = o.settle(o.waitISR, func(id string) bool {
		s, ok := o.newLeader(id)
		if !ok {
			return false
		}
		set, ok := o.isr[id]
		return ok && set.Leader == s.Leader && set.Term >= s.Term
	})
	clear(o.touched)
	return len(o.waitISR) == 0
}

// observer is the observer process as the simulation runs it.
type observer struct {
	cmd   *exec.Cmd
	lines chan string // its standard output, closed when it ends
	err   strings.Builder
	marks map[string]time.Time // the "half" and "most" lines' times
}

// startObserver runs `bin simulate observe` on w and waits for it to be
// watching.
func startObserver(ctx context.Context, bin string, w Watch) (*observer, error) {
	spec, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	o := &observer{cmd: exec.Command(bin, "simulate", "observe"), lines: make(chan string, 16), marks: map[string]time.Time{}}
	o.cmd.SysProcAttr = childAttr()
	o.cmd.Stdin = strings.NewReader(string(spec))
	o.cmd.Stderr = &o.err
	stdout, err := o.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := o.cmd.Start(); err != nil {
		return nil, fmt.Errorf("simulate cluster: starting the failover observer: %w", err)
	}
	go func() {
		defer close(o.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			o.lines <- sc.Text()
		}
	}()
	if _, err := o.next(ctx, lineReady, time.Minute); err != nil {
		o.stop()
		return nil, err
	}
	return o, nil
}

// next waits for the observer's next line other than a "left", "half" or
// "most" one, which must be want; it returns that line's time. left, when
// set, sees the "left" lines meanwhile; the others go to marks.
func (o *observer) next(ctx context.Context, want string, limit time.Duration, left ...func(led, isr int)) (time.Time, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-t.C:
			return time.Time{}, fmt.Errorf("simulate cluster: the failover observer saw no %q within %s", want, limit)
		case line, ok := <-o.lines:
			if !ok {
				_ = o.cmd.Wait()
				return time.Time{}, fmt.Errorf("simulate cluster: the failover observer ended before %q: %s", want, strings.TrimSpace(o.err.String()))
			}
			f := strings.Fields(line)
			if len(f) == 3 && f[0] == lineLeft {
				a, err1 := strconv.Atoi(f[1])
				b, err2 := strconv.Atoi(f[2])
				if err := errors.Join(err1, err2); err == nil && len(left) > 0 {
					left[0](a, b)
				}
				continue
			}
			if len(f) == 2 && (f[0] == lineHalf || f[0] == lineMost) {
				if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					o.marks[f[0]] = time.Unix(0, ns)
				}
				continue
			}
			if len(f) == 0 || f[0] != want {
				return time.Time{}, fmt.Errorf("simulate cluster: the failover observer said %q, waiting for %q", line, want)
			}
			if len(f) == 1 {
				return time.Time{}, nil
			}
			ns, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("simulate cluster: the failover observer said %q: %w", line, err)
			}
			return time.Unix(0, ns), nil
		}
	}
}

// stop ends the observer, if it has not ended, and waits for it.
func (o *observer) stop() {
	_ = o.cmd.Process.Kill()
	for range o.lines {
		// drained until its output closes
	}
	_ = o.cmd.Wait()
}

func (o *observer) pid() int { return o.cmd.Process.Pid }
