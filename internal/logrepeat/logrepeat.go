// Package logrepeat logs a recurring condition once per interval with a count
// of the repeats in between, instead of once per occurrence: a retry loop that
// fails every second then writes one line every interval that says how often
// it failed, and a line the first time it fails, so nothing is hidden.
package logrepeat

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// MaxKeys bounds the conditions tracked at once; past it the oldest is
// forgotten (its next occurrence logs at once).
const MaxKeys = 1024

// Limiter logs each key at most once per Every.
type Limiter struct {
	lg    *zap.Logger
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*seen
}

type seen struct {
	logged     time.Time // last line written
	suppressed int       // occurrences since then
}

// New returns a Limiter writing to lg at most once per every per key; now
// is the clock (nil: time.Now).
func New(lg *zap.Logger, every time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{lg: lg, every: every, now: now, keys: map[string]*seen{}}
}

// Warn logs msg at warn level for key, or counts it if key was logged less
// than Every ago. A line after suppressed ones carries "repeated" (how many
// were not written) and "over" (the time since the last written line).
func (l *Limiter) Warn(key, msg string, fields ...zap.Field) {
	l.log(zapcore.WarnLevel, key, msg, fields)
}

// Info is Warn at info level.
func (l *Limiter) Info(key, msg string, fields ...zap.Field) {
	l.log(zapcore.InfoLevel, key, msg, fields)
}

// Reset forgets key: the condition ended, so its next occurrence is news.
// It returns how many occurrences were suppressed since the last line.
func (l *Limiter) Reset(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.keys[key]
	if !ok {
		return 0
	}
	delete(l.keys, key)
	return s.suppressed
}

func (l *Limiter) log(lvl zapcore.Level, key, msg string, fields []zap.Field) {
	now := l.now()
	l.mu.Lock()
	s, ok := l.keys[key]
	if ok && now.Sub(s.logged) < l.every {
		s.suppressed++
		l.mu.Unlock()
		return
	}
	repeated, since := 0, time.Duration(0)
	if ok {
		repeated, since = s.suppressed, now.Sub(s.logged)
		s.logged, s.suppressed = now, 0
	} else {
		if len(l.keys) >= MaxKeys {
			l.evictOldest()
		}
		l.keys[key] = &seen{logged: now}
	}
	l.mu.Unlock()
	if repeated > 0 {
		fields = append(fields[:len(fields):len(fields)], zap.Int("repeated", repeated), zap.Duration("over", since))
	}
	if ce := l.lg.Check(lvl, msg); ce != nil {
		ce.Write(fields...)
	}
}

func (l *Limiter) evictOldest() {
	var oldest string
	var at time.Time
	for k, s := range l.keys {
		if oldest == "" || s.logged.Before(at) {
			oldest, at = k, s.logged
		}
	}
	delete(l.keys, oldest)
}
