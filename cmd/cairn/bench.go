package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cairn-db/cairn/internal/benchwrite"
)

func bench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "write" {
		fmt.Fprintln(stderr, "cairn bench: want `cairn bench write` (see cairn bench write --help)")
		return 2
	}
	fs := newFlagSet("bench write")
	var p benchwrite.Params
	fs.StringVar(&p.URL, "url", "http://127.0.0.1:9000", "the broker's base URL; batches go to /write")
	fs.StringVar(&p.DB, "db", "bench", "database written")
	fs.IntVar(&p.Shards, "shards", 0, "create the database with this many shards (RF 1) when it does not exist; 0: it must exist")
	fs.IntVar(&p.Series, "series", 40000, "series written, split evenly between the senders")
	fs.IntVar(&p.SeriesOffset, "series-offset", 0, "first series id: a run with a new offset adds new series")
	fs.IntVar(&p.Senders, "senders", 8, "concurrent writers")
	fs.IntVar(&p.Batch, "batch", 5000, "points per request")
	fs.StringVar(&p.Fields, "fields", "float=1", "fields per point by kind: float, int, uint, string, bool with counts, e.g. float=2,int=1,string=1,bool=1")
	fs.DurationVar(&p.Duration, "duration", 20*time.Second, "how long to write")
	fs.StringVar(&p.Precision, "precision", "ms", "timestamp unit: ns, us, ms or s")
	fs.StringVar(&p.Measurement, "measurement", "bench", "the points' measurement")
	fs.DurationVar(&p.Interval, "interval", 10*time.Second, "timestamp step between two points of a series")
	fs.IntVar(&p.PID, "pid", 0, "the server's process id for its CPU and RSS; 0: the process listening on --url's port when it is local")
	fs.DurationVar(&p.Timeout, "timeout", 30*time.Second, "one request's timeout")
	latencyLog := fs.String("latency-log", "", "write one line per acknowledged batch to this file when the run ends, in send order: ms from the run's start to its send, its latency in ms")
	if code, done := parse(fs, args[1:], stdout, stderr,
		"cairn bench write [--url U --db D --series N --senders C --batch B --fields MIX --duration D]",
		`Write load generator (the shape of InfluxData's inch). Each sender owns a slice
of the series and sends batches of one point per series (tags host and
region); a pass over its series advances the timestamp by --interval. Prints
one JSON line: points/s, p50/p99/max batch latency, failed batches and, when
the server process is found (--pid, or a local --url), its CPU seconds per
million points, RSS and the collector's CPU fraction (from /metrics).
A 429 or 503 answer with Retry-After is waited out and the batch sent again.`); done {
		return code
	}
	if err := p.Validate(); err != nil {
		fmt.Fprintf(stderr, "cairn bench write: %v\n", err)
		if errors.Is(err, benchwrite.ErrInvalidParams) {
			return 2
		}
		return 1
	}
	var logFile *os.File
	if *latencyLog != "" {
		f, err := os.Create(*latencyLog)
		if err != nil {
			fmt.Fprintf(stderr, "cairn bench write: %v\n", err)
			return 1
		}
		logFile, p.LatencyLog = f, f
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := benchwrite.Run(ctx, p)
	if logFile != nil {
		if cerr := logFile.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("latency log: %w", cerr)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "cairn bench write: %v\n", err)
		return 1
	}
	out, _ := json.Marshal(res)
	fmt.Fprintln(stdout, string(out))
	return 0
}
