package master

import (
	"time"

	"go.uber.org/zap"
)

// rateLog logs each distinct repeated condition (a key, say a database and
// its error) at most once per interval, with how many times it recurred since
// it was last logged: a database stuck on one error would otherwise log the
// same line every pass. It reads time only through now.
type rateLog struct {
	lg    *zap.Logger
	every time.Duration
	now   func() time.Time
	seen  map[string]*logEntry
}

type logEntry struct {
	msg        string
	last       time.Time
	suppressed int
}

// maxRateLogKeys bounds the conditions remembered; past it, stale ones are
// forgotten and, if none is stale, messages are logged untracked.
const maxRateLogKeys = 1024

func newRateLog(lg *zap.Logger, every time.Duration, now func() time.Time) *rateLog {
	return &rateLog{lg: lg, every: every, now: now, seen: map[string]*logEntry{}}
}

// Warn logs msg under key unless the same key logged the same message less
// than an interval ago; a logged repeat carries "repeated", the count of the
// occurrences not logged since.
func (r *rateLog) Warn(key, msg string, fields ...zap.Field) {
	now := r.now()
	id := key + "\x00" + msg
	for _, f := range fields {
		if f.Key == "error" {
			if err, ok := f.Interface.(error); ok {
				id += "\x00" + err.Error()
			}
		}
	}
	e, ok := r.seen[id]
	if ok && now.Sub(e.last) < r.every {
		e.suppressed++
		return
	}
	if ok && e.suppressed > 0 {
		fields = append(fields, zap.Int("repeated", e.suppressed))
	}
	r.lg.Warn(msg, fields...)
	if !ok {
		if len(r.seen) >= maxRateLogKeys {
			r.prune(now)
		}
		if len(r.seen) >= maxRateLogKeys {
			return
		}
		e = &logEntry{msg: msg}
		r.seen[id] = e
	}
	e.last, e.suppressed = now, 0
}

// Resolved forgets every condition logged under key: the next occurrence is
// news again.
func (r *rateLog) Resolved(key string) {
	for id := range r.seen {
		if len(id) > len(key) && id[:len(key)] == key && id[len(key)] == 0 {
			delete(r.seen, id)
		}
	}
}

func (r *rateLog) prune(now time.Time) {
	for id, e := range r.seen {
		if now.Sub(e.last) >= r.every {
			delete(r.seen, id)
		}
	}
}
