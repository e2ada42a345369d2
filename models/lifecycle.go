package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Day is the "d" unit of a Duration.
const Day = 24 * time.Hour

// DefaultAhead is how far past the broker's clock a point may be stamped
// when a database does not say (its Ahead is 0).
const DefaultAhead = Day

// Duration is a span of a database's data lifecycle (retention, accepted
// time window, partition length), written in JSON as a string: Go's
// units plus d (days) and w (weeks), e.g. "30d", "1d12h", "90m"; "0" or
// "" is zero. The API keeps it to whole seconds.
type Duration time.Duration

// ParseDuration reads a Duration; "inf" (InfluxQL's INF) is zero, as
// retention 0 means forever.
func ParseDuration(s string) (Duration, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "0", "inf":
		return 0, nil
	}
	var total time.Duration
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		j := i
		for j < len(rest) && (rest[j] < '0' || rest[j] > '9') {
			j++
		}
		if i == 0 || j == i {
			return 0, fmt.Errorf("invalid duration %q: want a number and a unit (s, m, h, d, w), e.g. 30d or 1h30m", s)
		}
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		unit, ok := durationUnits[rest[i:j]]
		if err != nil || !ok {
			return 0, fmt.Errorf("invalid duration %q: units are s, m, h, d and w", s)
		}
		if n > int64(maxDuration/unit) || total > maxDuration-time.Duration(n)*unit {
			return 0, fmt.Errorf("invalid duration %q: longer than %d days", s, maxDuration/Day)
		}
		total += time.Duration(n) * unit
		rest = rest[j:]
	}
	return Duration(total), nil
}

// maxDuration keeps every sum of lifecycle spans far from overflow.
const maxDuration = 100 * 365 * Day

var durationUnits = map[string]time.Duration{
	"s": time.Second, "m": time.Minute, "h": time.Hour, "d": Day, "w": 7 * Day,
}

// String writes d in the largest units that keep it exact, to the second:
// "30d", "1d12h", "1m30s", "0".
func (d Duration) String() string {
	if d == 0 {
		return "0"
	}
	var b strings.Builder
	rest := time.Duration(d)
	if rest < 0 {
		b.WriteByte('-')
		rest = -rest
	}
	for _, u := range []struct {
		name string
		unit time.Duration
	}{{"d", Day}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}} {
		if n := rest / u.unit; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10))
			b.WriteString(u.name)
			rest -= n * u.unit
		}
	}
	return b.String()
}

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes the string form.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads the string form.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`a duration is a string such as "30d", "24h" or "0"`)
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// PartitionLength is the time span of one partition of d's shards: the
// configured one, else chosen from the retention as InfluxDB chooses its
// shard-group duration (1 h under 2 days, 1 day under 180 days, else 7
// days; forever: 7 days).
func (d Database) PartitionLength() time.Duration {
	if d.Partition > 0 {
		return d.Partition.D()
	}
	r := d.Retention.D()
	switch {
	case r == 0 || r >= 180*Day:
		return 7 * Day
	case r >= 2*Day:
		return Day
	}
	return time.Hour
}

// AheadLimit is how far past now a point of d may be stamped.
func (d Database) AheadLimit() time.Duration {
	if d.Ahead > 0 {
		return d.Ahead.D()
	}
	return DefaultAhead
}

// BeheadLimit is how far before now a point of d may be stamped: the
// shorter of Behead and Retention, 0 when neither bounds it.
func (d Database) BeheadLimit() time.Duration {
	b, r := d.Behead.D(), d.Retention.D()
	switch {
	case b == 0:
		return r
	case r == 0:
		return b
	}
	return min(b, r)
}

// DefaultPolicy names the one retention policy of a database that was
// never given another name (InfluxDB's default policy).
const DefaultPolicy = "autogen"

// PolicyName is the name InfluxQL shows for d's retention policy.
func (d Database) PolicyName() string {
	if d.Policy != "" {
		return d.Policy
	}
	return DefaultPolicy
}

// ApplyLifecycle sets the lifecycle fields p gives (retention, ahead,
// behead, partition, policy name, rollups) and says whether it gave any.
func (d *Database) ApplyLifecycle(p DatabasePatch) bool {
	given := false
	for _, f := range []struct {
		from *Duration
		to   *Duration
	}{{p.Retention, &d.Retention}, {p.Ahead, &d.Ahead}, {p.Behead, &d.Behead}, {p.Partition, &d.Partition}} {
		if f.from != nil {
			*f.to, given = *f.from, true
		}
	}
	if p.Policy != nil {
		d.Policy, given = *p.Policy, true
	}
	if p.Rollups != nil {
		d.Rollups, given = *p.Rollups, true
	}
	return given
}

// Window is the accepted time window of d's points at now, in unix
// nanoseconds, both ends included: unbounded behind when neither Behead
// nor Retention bounds it.
func (d Database) Window(now time.Time) (lo, hi int64) {
	hi = now.Add(d.AheadLimit()).UnixNano()
	if b := d.BeheadLimit(); b > 0 {
		return now.Add(-b).UnixNano(), hi
	}
	return math.MinInt64, hi
}

// WindowRule says where Window's ends come from, for error messages.
func (d Database) WindowRule() string {
	behead := "no behead"
	switch b := d.BeheadLimit(); {
	case b > 0 && d.Behead > 0 && (d.Retention == 0 || d.Behead < d.Retention):
		behead = "behead " + Duration(b).String()
	case b > 0:
		behead = "retention " + Duration(b).String()
	}
	return behead + ", ahead " + Duration(d.AheadLimit()).String()
}

// Rollup is one downsampled level of a database: every Interval, per
// series, the shards keep a cell of its points' count, sum, min, max, first
// and last (float, integer and unsigned fields; strings and booleans are
// not rolled up), kept for Retention (0: forever) whatever the raw
// retention. Functions are the aggregates a query may take from it (mean
// needs sum and count); empty: all of them.
type Rollup struct {
	Interval  Duration `json:"interval"`
	Retention Duration `json:"retention,omitempty"`
	Functions []string `json:"functions,omitempty"`
}

// RollupFunctions are the aggregates a rollup level can answer.
var RollupFunctions = []string{"count", "sum", "min", "max", "first", "last"}

// MaxRollups bounds a database's rollup levels.
const MaxRollups = 4

// Has says whether the level answers the aggregate fn (mean: sum and count).
func (r Rollup) Has(fn string) bool {
	if len(r.Functions) == 0 {
		return fn == "mean" || slices.Contains(RollupFunctions, fn)
	}
	if fn == "mean" {
		return slices.Contains(r.Functions, "sum") && slices.Contains(r.Functions, "count")
	}
	return slices.Contains(r.Functions, fn)
}

// Name is the level's name among the retention policies InfluxQL shows.
func (r Rollup) Name() string { return "rollup_" + r.Interval.String() }

// CheckRollups says what is wrong with rs as the rollup levels of a
// database whose raw points are kept for retention, or nil.
func CheckRollups(rs []Rollup, retention Duration) error {
	if len(rs) == 0 {
		return nil
	}
	if len(rs) > MaxRollups {
		return fmt.Errorf("%d rollup levels: at most %d", len(rs), MaxRollups)
	}
	if retention == 0 {
		return errors.New("rollups need a retention: without one the raw points answer every range")
	}
	for i, r := range rs {
		iv := r.Interval.D()
		switch {
		case iv < time.Second || iv%time.Second != 0:
			return fmt.Errorf("rollup %d: invalid interval %q: want a whole number of seconds, at least 1s", i, r.Interval)
		case iv <= time.Hour && time.Hour%iv != 0:
			return fmt.Errorf("rollup %d: interval %s does not divide an hour", i, r.Interval)
		case iv > time.Hour && iv%time.Hour != 0:
			return fmt.Errorf("rollup %d: interval %s is not a whole number of hours", i, r.Interval)
		case r.Retention != 0 && r.Retention < retention:
			return fmt.Errorf("rollup %s: retention %s is shorter than the raw retention %s", r.Interval, r.Retention, retention)
		case r.Retention.D()%time.Second != 0 || r.Retention < 0:
			return fmt.Errorf("rollup %s: invalid retention %q: want 0 or a positive whole number of seconds", r.Interval, r.Retention)
		}
		if i > 0 {
			prev := rs[i-1].Interval.D()
			if iv <= prev || iv%prev != 0 {
				return fmt.Errorf("rollup %s: intervals must grow and each divide the next (%s before it)", r.Interval, rs[i-1].Interval)
			}
		}
		for _, fn := range r.Functions {
			if !slices.Contains(RollupFunctions, fn) {
				return fmt.Errorf("rollup %s: unknown function %q: known are %s (mean is sum and count)", r.Interval, fn, strings.Join(RollupFunctions, ", "))
			}
		}
	}
	return nil
}

// RollupIntervals are the intervals of d's rollup levels, in order: what a
// shard computes.
func (d Database) RollupIntervals() []time.Duration {
	out := make([]time.Duration, len(d.Rollups))
	for i, r := range d.Rollups {
		out[i] = r.Interval.D()
	}
	return out
}
