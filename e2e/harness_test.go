package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-db/cairn/internal/verify"
	"github.com/stretchr/testify/require"
)

// cairnBin is the binary built once by TestMain.
var cairnBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cairn-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	cairnBin = filepath.Join(dir, "cairn")
	// The binary is built without -race even when the tests use it: the
	// timings under test (lease TTL, shutdown) are the product's, not the
	// race detector's.
	build := exec.Command("go", "build", "-o", cairnBin, "github.com/cairn-db/cairn/cmd/cairn")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building cairn:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	// Every process the suite starts checks the invariants in-process.
	_ = os.Setenv(verify.Env, "1")
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var (
	portsMu sync.Mutex
	// portsUsed stops two picks in one run from returning the same port once
	// the first listener is closed and before its process binds it.
	portsUsed = map[int]bool{}
)

// freePort returns a loopback port that was free a moment ago. It is drawn
// below the kernel's ephemeral range when there is room there: a process
// restarted on its ports (an etcd member keeps its peer URL) must find them
// free, and while it was down any outgoing connection of the suite's many
// processes could take a port of the ephemeral range as its source port
// (seen in CI: "bind: address already in use" on a restart).
func freePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	if lo := ephemeralLow(); lo > minPort+1000 {
		for range 200 {
			port := minPort + rand.IntN(lo-minPort)
			if portsUsed[port] {
				continue
			}
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				continue // taken by something else
			}
			require.NoError(t, ln.Close())
			portsUsed[port] = true
			return port
		}
	}
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		if !portsUsed[port] {
			portsUsed[port] = true
			return port
		}
	}
	require.FailNow(t, "no free port found")
	return 0
}

// minPort is the lowest port freePort draws.
const minPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// ip_local_port_range), or 0 when it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 0
	}
	return lo
}

// freeAddr is "127.0.0.1:<free port>".
func freeAddr(t testing.TB) string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }

// freeURL is "http://127.0.0.1:<free port>".
func freeURL(t testing.TB) string { return "http://" + freeAddr(t) }

var procSeq struct {
	sync.Mutex
	n int
}

// Proc is one cairn process. It can be stopped, killed and started again
// with the same arguments (same data dir, same ports).
type Proc struct {
	t      testing.TB
	name   string
	args   []string
	addr   string // --http-addr, empty when not given
	log    string // stdout and stderr of every run, appended
	client *http.Client
	// bin is the binary the next run starts (cairnBin unless another
	// release's: see startWith).
	bin string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current run has exited
	code int           // exit code of the last finished run
}

// start runs cairn with args. Its output goes to a file in the test's temp
// dir, printed (tail) if the test fails; the process is killed at cleanup.
func start(t testing.TB, args ...string) *Proc {
	t.Helper()
	return startWith(t, cairnBin, args...)
}

// startWith is start with another binary (another release's); setting the
// Proc's bin before a restart swaps it.
func startWith(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	procSeq.Lock()
	procSeq.n++
	n := procSeq.n
	procSeq.Unlock()
	p := &Proc{t: t, args: args, bin: bin, client: testClient(5 * time.Second)}
	p.name = fmt.Sprintf("proc%d", n)
	for i, a := range args {
		if i+1 >= len(args) {
			break
		}
		switch a {
		case "--http-addr":
			p.addr = args[i+1]
		case "--role":
			p.name += "-" + strings.ReplaceAll(args[i+1], ",", "+")
		}
	}
	p.log = filepath.Join(logDir(t), p.name+".log")
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- tail of %s (%s) ---\n%s", p.name, strings.Join(p.args, " "), tail(p.log, 40))
		}
	})
	p.launch()
	return p
}

// logDir is where a process's log goes: CAIRN_E2E_LOG_DIR when set (kept
// after the test, for reading a long nemesis run's interleaving), else the
// test's temporary dir.
func logDir(t testing.TB) string {
	if d := os.Getenv("CAIRN_E2E_LOG_DIR"); d != "" {
		d = filepath.Join(d, strings.ReplaceAll(t.Name(), "/", "_"))
		require.NoError(t, os.MkdirAll(d, 0o755))
		return d
	}
	return t.TempDir()
}

func (p *Proc) launch() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(p.t, err)
	defer f.Close()
	_, _ = fmt.Fprintf(f, "=== start %s %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(p.t, cmd.Start())
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode() // -1 when killed by a signal
		}
		p.mu.Lock()
		p.code = code
		p.mu.Unlock()
		close(done)
	}()
}

func (p *Proc) current() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

func (p *Proc) running() bool {
	_, done := p.current()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (p *Proc) signal(sig syscall.Signal) {
	p.t.Helper()
	require.NoError(p.t, p.trySignal(sig), "signal %v to %s", sig, p.name)
}

// trySignal sends sig to the current run; it fails with os.ErrProcessDone
// when that run has already exited (a process may stop on its own, e.g. one
// that found its node id held by another).
func (p *Proc) trySignal(sig syscall.Signal) error {
	cmd, _ := p.current()
	return cmd.Process.Signal(sig)
}

// kill ends the current run if it is still going (cleanup).
func (p *Proc) kill() {
	cmd, done := p.current()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// wait waits up to d for the current run to exit and returns its exit code.
func (p *Proc) wait(d time.Duration) int {
	p.t.Helper()
	_, done := p.current()
	select {
	case <-done:
	case <-time.After(d):
		require.FailNow(p.t, fmt.Sprintf("%s did not exit within %s", p.name, d))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code
}

// kill9 sends SIGKILL and waits for the process to be gone.
func (p *Proc) kill9() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	p.wait(10 * time.Second)
}

// term sends SIGTERM, waits for the exit, asserts exit code 0 and returns
// how long the shutdown took.
func (p *Proc) term() time.Duration {
	p.t.Helper()
	begin := time.Now()
	p.signal(syscall.SIGTERM)
	code := p.wait(15 * time.Second)
	took := time.Since(begin)
	require.Equal(p.t, 0, code, "%s exit code after SIGTERM", p.name)
	return took
}

// stop freezes the process (SIGSTOP); cont resumes it (SIGCONT).
func (p *Proc) stop() { p.t.Helper(); p.signal(syscall.SIGSTOP) }
func (p *Proc) cont() { p.t.Helper(); p.signal(syscall.SIGCONT) }

// restart starts the process again with the same arguments; the previous
// run must have exited.
func (p *Proc) restart() {
	p.t.Helper()
	require.False(p.t, p.running(), "%s is still running", p.name)
	p.launch()
}

// get calls GET on the process's HTTP API. Status 0 means no answer.
func (p *Proc) get(path string) (int, map[string]any) {
	return p.send(http.MethodGet, path, nil, "")
}

// post calls POST with body marshalled as JSON. Status 0 means no answer.
func (p *Proc) post(path string, body any) (int, map[string]any) {
	p.t.Helper()
	return p.send(http.MethodPost, path, body, "")
}

// send sends method path with an optional JSON body and Authorization header
// value (empty: none). Status 0 means no answer.
func (p *Proc) send(method, path string, body any, auth string) (int, map[string]any) {
	p.t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(p.t, err)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, "http://"+p.addr+path, rd)
	require.NoError(p.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

// waitStatus waits until GET path answers want and returns the body.
func (p *Proc) waitStatus(path string, want int, within time.Duration) map[string]any {
	p.t.Helper()
	var body map[string]any
	require.Eventually(p.t, func() bool {
		var code int
		code, body = p.get(path)
		return code == want
	}, within, 10*time.Millisecond, "%s: GET %s never answered %d", p.name, path, want)
	return body
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
