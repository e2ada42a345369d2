package simcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is the simulation's etcd,master,broker node: the real cairn binary
// in a child process, as in a deployment, where etcd and the master never
// share a process (nor a Go scheduler) with storage nodes. In one process
// with 1,000 agents' ~94k goroutines, etcd's raft loop and lease renewals
// waited behind the agents' and leases ran out while placing.
type server struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process exited
	err  error         // its exit status, once done
	api  string        // http://host:port
	log  string        // its log file ("" when it logs to Params.Log)
}

// startServer starts bin with args (its stdout and stderr go to logTo, or
// to a file in dir when that is nil) and waits until its HTTP API answers
// /api/v1/ready with 200. On any error the process is stopped.
func startServer(ctx context.Context, bin, dir, httpAddr string, args []string, logTo io.Writer) (*server, error) {
	s := &server{api: "http://" + httpAddr, done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.SysProcAttr = childAttr()
	if logTo == nil {
		s.log = filepath.Join(dir, "server.log")
		f, err := os.Create(s.log)
		if err != nil {
			return nil, err
		}
		defer f.Close() // the child holds its own descriptor
		logTo = f
	}
	s.cmd.Stdout, s.cmd.Stderr = logTo, logTo
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("simulate cluster: starting %s: %w", bin, err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	if err := s.awaitReady(ctx, 2*time.Minute); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// awaitReady polls /api/v1/ready every 50ms until it answers 200, the
// process exits, ctx ends or limit passed.
func (s *server) awaitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(s.api + "/api/v1/ready")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("simulate cluster: the etcd,master,broker process exited before it was ready (%v)%s", s.err, s.logTail())
		default:
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("simulate cluster: the etcd,master,broker process was not ready after %s%s", limit, s.logTail())
		}
	}
}

// logTail is the end of the process's log file, for an error.
func (s *server) logTail() string {
	if s.log == "" {
		return ""
	}
	b, err := os.ReadFile(s.log)
	if err != nil || len(b) == 0 {
		return ""
	}
	return ": " + strings.TrimSpace(string(b[max(0, len(b)-2048):]))
}

// stop sends SIGTERM, and SIGKILL if the process has not exited 20s later;
// it returns once the process is gone.
func (s *server) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const clockTicks = 100

// procCPU is the user + system CPU time of process pid from /proc (0 where
// there is none).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0
	}
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// goroutines is the process's go_goroutines gauge from its /metrics (0 when
// it does not answer).
func (s *server) goroutines() int {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(s.api + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(n)
		}
	}
	return 0
}
