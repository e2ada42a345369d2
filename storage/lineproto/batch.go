package lineproto

import (
	"errors"
	"fmt"
	"unsafe"
)

// Options tune ParseBatch.
type Options struct {
	Precision string // "ns" (also ""), "us", "ms", "s", "m" or "h"
	Now       int64  // the timestamp of lines without one, unix ns
	MaxPoints int    // points of the whole batch; 0: no limit
	Limits    Limits
	// Check, when set, is asked about every line that parsed within the
	// limits, with the line's first point (its metric, tags and
	// timestamp; the line's other fields follow it). An error drops the
	// line: ParseBatch counts it and names the first as the error says,
	// without "unable to parse" (e.g. InfluxDB's "points beyond retention
	// policy").
	Check func(line *Point) error
	// Given says the body is the caller's to give: nothing changes its
	// bytes after the call, ever. The points' strings then point into the
	// body itself instead of into one copy of it, which was a tenth of the
	// bytes a write allocated (issue 21). A caller that reuses its body (a
	// pooled buffer) may give it only if it reuses it after a write whose
	// every point is done with (the broker: a write that returned nil),
	// never after one that failed: its points may outlive a write that
	// timed out.
	Given bool
	// Into, when set, is the memory the batch's points and their tags are
	// cut from, a previous batch's (see Buffers).
	Into *Buffers
}

// Buffers is the memory of a parsed batch (its points and their tags),
// kept for the next batch: with many new series a batch's own copies were
// half of the bytes a write allocated, and the collections they brought on
// were the write tail's (issue 21). A caller takes a Buffers, parses into
// it, and gives it back (Reset) only once nothing refers to the points any
// more; points of a batch parsed into Buffers are valid until then.
type Buffers struct {
	points []Point
	slabs  [][]Tag // tag slabs, handed out in order
	used   int     // slabs handed out since Reset
}

// Reset makes b's memory ready for the next parse. The old batch's values
// stay until the next parse writes over them: clearing them was 2 % of
// the node's CPU in the +160k step (one profile), and what they keep
// alive is at most the one body they were parsed from.
func (b *Buffers) Reset() {
	b.points = b.points[:0]
	b.used = 0
}

// Bytes is the memory b holds, for a pool's bound.
func (b *Buffers) Bytes() int {
	n := cap(b.points) * int(unsafe.Sizeof(Point{}))
	for _, s := range b.slabs {
		n += cap(s) * int(unsafe.Sizeof(Tag{}))
	}
	return n
}

// slab returns an empty slab of room for at least n tags: b's next one
// when it has one that large, else a new one that b keeps.
func (b *Buffers) slab(n int) []Tag {
	if b.used < len(b.slabs) && cap(b.slabs[b.used]) >= n {
		b.used++
		return b.slabs[b.used-1][:0]
	}
	s := make([]Tag, 0, max(tagSlab, n))
	if b.used < len(b.slabs) {
		b.slabs[b.used] = s // a rare long line's: the smaller one goes
	} else {
		b.slabs = append(b.slabs, s)
	}
	b.used++
	return s
}

// Limits bound one line; a line over any is dropped (ErrLimit), never the
// batch. Zero fields mean no bound. They keep every series key well under
// what the storage engine can hold.
type Limits struct {
	SeriesKeyBytes int // the series key of each field: metric,tags#field, escaped
	TagValueBytes  int
	NameBytes      int // measurement, tag key and field key
	Tags           int // tags of one line
}

// ErrLimit marks a line dropped for a Limits bound.
var ErrLimit = errors.New("over a line limit")

// Batch is what ParseBatch made of a body.
type Batch struct {
	Points  []Point
	Dropped int        // lines dropped
	First   *LineError // the first line dropped; nil when none was
}

// LineError reports a line of a body that was dropped.
type LineError struct {
	Line int    // 1-based line number in the body
	Text string // the line, cut to maxQuoted bytes
	Msg  string
	// Refused: Options.Check dropped the line, Msg is its error's.
	Refused bool
	err     error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

func (e *LineError) Unwrap() error { return e.err }

// Reason is the line's part of InfluxDB's "partial write: <reason>
// dropped=N": "unable to parse '<line>': <why>", or Check's message.
func (e *LineError) Reason() string {
	if e.Refused {
		return e.Msg
	}
	return fmt.Sprintf("unable to parse '%s': %s", e.Text, e.Msg)
}

// maxQuoted bounds the part of a bad line an error quotes: a line can be
// megabytes long.
const maxQuoted = 256

// refused wraps Check's error so that drop tells it from a malformed line.
type refused struct{ err error }

func (r refused) Error() string { return r.err.Error() }
func (r refused) Unwrap() error { return r.err }

// drop counts a dropped line and keeps the first.
func (p *parser) drop(lineNo int, line []byte, err error) {
	p.dropped++
	if p.first != nil {
		return
	}
	text := string(line)
	if len(text) > maxQuoted {
		text = text[:maxQuoted] + "..."
	}
	var r refused
	p.first = &LineError{Line: lineNo, Text: text, Msg: err.Error(), Refused: errors.As(err, &r), err: err}
}

// checkSeries checks a line's measurement and tags against the limits and
// returns the length of its series keys without the field part, unescaped.
func (l *Limits) checkSeries(metric string, tags []Tag) (int, error) {
	if l.Tags > 0 && len(tags) > l.Tags {
		return 0, fmt.Errorf("%w: %d tags, more than the %d allowed (write-max-tags)", ErrLimit, len(tags), l.Tags)
	}
	if err := l.checkName("measurement", metric); err != nil {
		return 0, err
	}
	n := len(metric)
	for _, t := range tags {
		if err := l.checkName("tag key", t.Key); err != nil {
			return 0, err
		}
		if l.TagValueBytes > 0 && len(t.Value) > l.TagValueBytes {
			return 0, fmt.Errorf("%w: tag %q value of %d bytes, over the %d-byte limit (write-max-tag-value-bytes)",
				ErrLimit, cut(t.Key), len(t.Value), l.TagValueBytes)
		}
		n += 2 + len(t.Key) + len(t.Value)
	}
	return n, nil
}

// checkField checks a field key of the line of metric and tags, whose
// series key is base bytes before the field part, unescaped.
func (l *Limits) checkField(metric string, tags []Tag, field string, base int) error {
	if err := l.checkName("field key", field); err != nil {
		return err
	}
	n := base + 1 + len(field)
	if l.SeriesKeyBytes <= 0 || 2*n <= l.SeriesKeyBytes {
		return nil // escaping at most doubles a key
	}
	n = 1 + escapedLen(metric) + escapedLen(field)
	for _, t := range tags {
		n += 2 + escapedLen(t.Key) + escapedLen(t.Value)
	}
	if n > l.SeriesKeyBytes {
		return fmt.Errorf("%w: series key of %d bytes (measurement, tags and field %q), over the %d-byte limit (write-max-series-key-bytes)",
			ErrLimit, n, cut(field), l.SeriesKeyBytes)
	}
	return nil
}

func (l *Limits) checkName(what, name string) error {
	if l.NameBytes > 0 && len(name) > l.NameBytes {
		return fmt.Errorf("%w: %s of %d bytes, over the %d-byte limit (write-max-name-bytes)", ErrLimit, what, len(name), l.NameBytes)
	}
	return nil
}

// cut shortens a name quoted in an error.
func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			n++
		}
	}
	return n
}
