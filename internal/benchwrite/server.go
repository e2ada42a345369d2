package benchwrite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Server is what the run cost the server process, when it was found.
type Server struct {
	PID        int     `json:"pid"`
	CPUS       float64 `json:"cpu_s"`
	CPUCores   float64 `json:"cpu_cores"`       // CPU seconds per second of the run
	CPUSPerMpt float64 `json:"cpu_s_per_mpt"`   // CPU seconds per million acknowledged points
	RSSMiB     float64 `json:"rss_mib"`         // resident set at the end
	RSSPeakMiB float64 `json:"rss_peak_mib"`    // the process's peak resident set (since it started)
	GCFraction float64 `json:"gc_cpu_fraction"` // the collector's share of the CPU GOMAXPROCS offers, from /metrics
	Note       string  `json:"note,omitempty"`  // why a figure is missing
	cpuBegin   float64 // CPU seconds at the start
	wallBegin  time.Time
	gcBegin    runtimeCPU
}

// clockTicks is Linux's USER_HZ, the unit of /proc/PID/stat's times (100 on
// every architecture Go supports).
const clockTicks = 100

// serverWatch samples the server process around a run.
type serverWatch struct {
	pid     int
	metrics string // the node's /metrics URL
	client  *http.Client
	s       *Server
	note    string
}

func newServerWatch(p Params, client *http.Client) *serverWatch {
	w := &serverWatch{pid: p.PID, client: client, metrics: strings.TrimRight(p.URL, "/") + "/metrics"}
	if w.pid == 0 {
		w.pid, w.note = localPID(p.URL)
	}
	return w
}

func (w *serverWatch) begin(ctx context.Context) {
	if w.pid <= 0 {
		return
	}
	cpu, err := procCPU(w.pid)
	if err != nil {
		w.note = err.Error()
		return
	}
	w.s = &Server{PID: w.pid, cpuBegin: cpu, wallBegin: time.Now()}
	w.s.gcBegin, _ = scrapeRuntimeCPU(ctx, w.client, w.metrics)
}

// end fills the server's figures for points acknowledged since begin; nil
// when the process was not found.
func (w *serverWatch) end(ctx context.Context, points int64) *Server {
	if w.s == nil {
		if w.note == "" {
			return nil
		}
		return &Server{Note: w.note}
	}
	s := w.s
	cpu, err := procCPU(w.pid)
	if err != nil {
		s.Note = err.Error()
		return s
	}
	s.CPUS = round(cpu-s.cpuBegin, 2)
	s.CPUCores = round(s.CPUS/time.Since(s.wallBegin).Seconds(), 2)
	if points > 0 {
		s.CPUSPerMpt = round(s.CPUS/(float64(points)/1e6), 3)
	}
	rss, peak, err := procRSS(w.pid)
	if err != nil {
		s.Note = err.Error()
	}
	s.RSSMiB, s.RSSPeakMiB = round(rss, 1), round(peak, 1)
	if gc, err := scrapeRuntimeCPU(ctx, w.client, w.metrics); err == nil && s.gcBegin.total > 0 {
		if d := gc.total - s.gcBegin.total; d > 0 {
			s.GCFraction = round((gc.gc-s.gcBegin.gc)/d, 3)
		}
	} else if err != nil {
		s.Note = err.Error()
	}
	return s
}

// procCPU is the user plus system CPU seconds of process pid.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("server CPU: %w", err)
	}
	// The command name (field 2) may hold spaces; fields count from its ')'.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("server CPU: short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("server CPU: bad /proc/%d/stat", pid)
	}
	return (utime + stime) / clockTicks, nil
}

// procRSS is the process's resident set now and at its peak, in MiB.
func procRSS(pid int) (rss, peak float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("server RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, _ := strings.Cut(sc.Text(), ":")
		kb, perr := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
		switch {
		case perr != nil:
		case name == "VmRSS":
			rss = kb / 1024
		case name == "VmHWM":
			peak = kb / 1024
		}
	}
	return rss, peak, sc.Err()
}

// runtimeCPU is the Go runtime's CPU-time estimates the node exports.
type runtimeCPU struct{ gc, total float64 }

// scrapeRuntimeCPU reads go_cpu_classes_gc_total_cpu_seconds_total and
// go_cpu_classes_total_cpu_seconds_total from the node's /metrics.
func scrapeRuntimeCPU(ctx context.Context, client *http.Client, metricsURL string) (runtimeCPU, error) {
	var r runtimeCPU
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return r, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return r, fmt.Errorf("server GC: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("server GC: /metrics answered %s", resp.Status)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		name, value, _ := strings.Cut(line, " ")
		v, perr := strconv.ParseFloat(value, 64)
		if perr != nil {
			continue
		}
		switch name {
		case "go_cpu_classes_gc_total_cpu_seconds_total":
			r.gc = v
		case "go_cpu_classes_total_cpu_seconds_total":
			r.total = v
		}
	}
	if r.total == 0 {
		return r, fmt.Errorf("server GC: /metrics has no go_cpu_classes_total_cpu_seconds_total")
	}
	return r, nil
}

// localPID finds the process listening on rawURL's port when its host is
// this machine's loopback; 0 with a note when it cannot.
func localPID(rawURL string) (int, string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, ""
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		return 0, "server process: the URL names no port (use --pid)"
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, "" // a remote server: nothing to measure
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return 0, ""
	}
	inodes := listeningInodes(uint16(n))
	if len(inodes) == 0 {
		return 0, fmt.Sprintf("server process: no listener on port %s found in /proc/net (use --pid)", port)
	}
	if pid := socketOwner(inodes); pid > 0 {
		return pid, ""
	}
	return 0, fmt.Sprintf("server process: the listener on port %s belongs to no process this user can see (use --pid)", port)
}

// listeningInodes are the socket inodes listening on port (TCP, v4 and v6).
func listeningInodes(port uint16) map[string]bool {
	inodes := map[string]bool{}
	want := fmt.Sprintf(":%04X", port)
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			f := strings.Fields(line)
			// sl local_address rem_address st ... uid timeout inode
			if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				inodes[f[9]] = true
			}
		}
	}
	return inodes
}

// socketOwner is the first process holding one of the socket inodes.
func socketOwner(inodes map[string]bool) int {
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	return 0
}
