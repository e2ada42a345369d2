package lineproto

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/cairn-db/cairn/models"
	"github.com/influxdata/line-protocol/v2/lineprotocol"
)

// internLimit caps the per-call string table so a high-cardinality body cannot
// grow it without bound; past the cap strings are simply allocated.
const internLimit = 1 << 14

// tagSlab is how many tags one allocation of the lines' tag copies holds.
const tagSlab = 512

// Parse parses a whole line-protocol body, all or nothing: on the first
// malformed line it returns that line's *LineError and no points. precision
// is "ns" (also ""), "us", "ms", "s", "m" or "h"; lines without a timestamp
// get now (unix ns). Writes use ParseBatch, which drops bad lines instead.
//
// Every field keeps its type (Point.Type): float, integer (1i), unsigned
// (1u), boolean (t, true, F, ...) and string ("...", with its escapes
// undone).
func Parse(body []byte, precision string, now int64) ([]Point, error) {
	b, err := ParseBatch(body, Options{Precision: precision, Now: now})
	if err != nil {
		return nil, err
	}
	if b.First != nil {
		return nil, b.First
	}
	return b.Points, nil
}

// ParseBatch parses a write batch: the points of every good line, and the
// lines it dropped (malformed, over a Limits bound, or refused by
// o.Check), counted and the first one named. Its only errors are about the
// whole batch: a bad precision, or more than o.MaxPoints points, which it
// reports (ErrTooManyPoints) as soon as it gets there, so a huge batch
// never sits decoded in memory.
func ParseBatch(body []byte, o Options) (Batch, error) {
	mult, err := precisionMultiplier(o.Precision)
	if err != nil {
		return Batch{}, err
	}
	lines := bytes.Count(body, []byte{'\n'}) + 1
	if o.MaxPoints > 0 {
		lines = min(lines, o.MaxPoints+1)
	}
	p := parser{
		mult:  mult,
		now:   o.Now,
		max:   o.MaxPoints,
		lim:   o.Limits,
		check: o.Check,
		strs:  make(map[string]string, 64),
		body:  body,
		into:  o.Into,
	}
	if p.into != nil {
		p.into.Reset()
		p.points = slices.Grow(p.into.points, lines)
		// Kept even from a failed parse: the memory is the same.
		defer func() { p.into.points = p.points[:0] }()
	} else {
		p.points = make([]Point, 0, lines)
	}
	if o.Given && len(body) > 0 {
		p.bodyStr = unsafe.String(&body[0], len(body))
	}
	if p.parsePlain(body) {
		return Batch{Points: p.points}, nil
	}
	p.restart()
	if wholeBodySafe(body) {
		err := p.parseBody(body)
		switch {
		case err == nil:
			return Batch{Points: p.points}, nil
		case errors.Is(err, ErrTooManyPoints):
			return Batch{}, err
		}
		// A bad line: parse again line by line, which names it and
		// keeps the others.
		p.restart()
	}
	if err := p.parseLines(body); err != nil {
		return Batch{}, err
	}
	return Batch{Points: p.points, Dropped: p.dropped, First: p.first}, nil
}

// restart drops the points made so far, to parse the body again.
func (p *parser) restart() {
	p.points, p.last = p.points[:0], nil
}

// parseLines splits body into entries by hand, one decoder per entry,
// because the decoder does not expose the line it is on and our own errors
// (bad timestamp, a refused line) must name it. An entry ends at a newline
// outside a quoted string field (nextEntry), and is named by the line it
// starts on. A bad entry's points are taken back and it is counted as
// dropped.
func (p *parser) parseLines(body []byte) error {
	lineNo := 1
	for len(body) > 0 {
		line, rest := nextEntry(body)
		body = rest
		n := len(p.points)
		if err := p.parseLine(line); err != nil {
			if errors.Is(err, ErrTooManyPoints) {
				return err
			}
			p.points = p.points[:n]
			p.drop(lineNo, line, err)
		}
		lineNo += 1 + bytes.Count(line, []byte{'\n'})
	}
	return nil
}

// nextEntry cuts body's first entry off: up to the first newline that is
// not inside a string field's quotes (a string opens with '"' right after
// a field's '=', past the line's first unescaped space, and closes at the
// next unescaped '"'). A backslash escapes the byte after it.
func nextEntry(body []byte) (entry, rest []byte) {
	fields, inString := false, false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '\\':
			if i+1 < len(body) && body[i+1] != '\n' {
				i++
			}
		case inString:
			inString = c != '"'
		case c == '\n':
			return body[:i], body[i+1:]
		case c == ' ':
			fields = true
		case c == '"' && fields && i > 0 && body[i-1] == '=':
			inString = true
		}
	}
	return body, nil
}

// wholeBodySafe says whether one decoder over the whole body reads the same
// entries as one decoder per entry: true unless an escaped newline could
// join two lines.
func wholeBodySafe(body []byte) bool {
	return !bytes.Contains(body, []byte("\\\n"))
}

// parseBody parses every entry of body with one decoder (a decoder per line
// allocates its own buffers: half a kilobyte per line). Its errors do not
// name the line; ParseLimited parses again line by line for that.
func (p *parser) parseBody(body []byte) error {
	d := lineprotocol.NewDecoderWithBytes(body)
	for d.Next() {
		if err := p.parseEntry(d); err != nil {
			return err
		}
	}
	return nil
}

func precisionMultiplier(precision string) (int64, error) {
	switch precision {
	case "", "ns":
		return 1, nil
	case "us":
		return 1e3, nil
	case "ms":
		return 1e6, nil
	case "s":
		return 1e9, nil
	case "m": // InfluxDB 1.x's minutes and hours
		return 60e9, nil
	case "h":
		return 3600e9, nil
	}
	return 0, fmt.Errorf("%w %q (want ns, us, ms, s, m or h)", ErrBadPrecision, precision)
}

type parser struct {
	mult  int64
	now   int64
	max   int // points; 0: no limit
	lim   Limits
	check func(line *Point) error
	// dropped counts the lines dropped so far, first names the first.
	dropped int
	first   *LineError
	strs    map[string]string
	tags    []Tag      // scratch for the current line
	last    []Tag      // sorted tags of the previous line, shared when they repeat
	slab    []Tag      // where the lines' tag copies are cut from
	prev    [16]string // internAt's last string per position
	// body is the whole body being parsed and bodyStr the body as a
	// string (Options.Given) or one copy of it, made at the first string
	// taken from it: the points' strings are slices of it.
	body    []byte
	bodyStr string
	points  []Point
	into    *Buffers // where points and tag slabs come from; nil: new memory
}

// internAt is intern that first compares b with the string last seen at the
// same position of a line (metric, field, n-th tag key or value): lines of a
// batch mostly repeat them, and the comparison is cheaper than hashing.
func (p *parser) internAt(slot int, b []byte) string {
	if slot >= len(p.prev) {
		return p.inBody(b)
	}
	if s := p.prev[slot]; s == string(b) {
		return s
	}
	s := p.inBody(b)
	p.prev[slot] = s
	return s
}

// inBody returns b as a string: a slice of one copy of the whole body when
// b lies in the body (it does unless it held escapes), which costs neither
// an allocation nor a hash per string; else intern's.
func (p *parser) inBody(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if off := cap(p.body) - cap(b); off >= 0 && off+len(b) <= len(p.body) && &p.body[off] == &b[0] {
		if p.bodyStr == "" {
			p.bodyStr = string(p.body)
		}
		return p.bodyStr[off : off+len(b)]
	}
	return p.intern(b)
}

// intern returns b as a string, reusing one allocation for the metric names and
// tags that repeat on nearly every line of a batch.
func (p *parser) intern(b []byte) string {
	if s, ok := p.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(p.strs) < internLimit {
		p.strs[s] = s
	}
	return s
}

func (p *parser) parseLine(line []byte) error {
	d := lineprotocol.NewDecoderWithBytes(line)
	if !d.Next() {
		return nil // blank or comment line
	}
	return p.parseEntry(d)
}

// parseEntry parses the entry d is on.
func (p *parser) parseEntry(d *lineprotocol.Decoder) error {
	m, err := d.Measurement()
	if err != nil {
		return decodeMsg(err)
	}
	metric := p.internAt(0, m)
	p.tags = p.tags[:0]
	for {
		k, v, err := d.NextTag()
		if err != nil {
			return decodeMsg(err)
		}
		if k == nil {
			break
		}
		p.addTag(k, v)
	}
	tags, base, err := p.series(metric)
	if err != nil {
		return err
	}
	first := len(p.points)
	for {
		k, v, err := d.NextField()
		if err != nil {
			return decodeMsg(err)
		}
		if k == nil {
			break
		}
		pt := Point{Metric: metric, Tags: tags}
		switch v.Kind() {
		case lineprotocol.Float:
			pt.Value = v.FloatV()
		case lineprotocol.Int:
			pt.Type, pt.Int, pt.Value = models.FieldInteger, v.IntV(), float64(v.IntV())
		case lineprotocol.Uint:
			pt.Type, pt.Int, pt.Value = models.FieldUnsigned, int64(v.UintV()), float64(v.UintV())
		case lineprotocol.Bool:
			pt.Type = models.FieldBoolean
			if v.BoolV() {
				pt.Int, pt.Value = 1, 1
			}
		case lineprotocol.String:
			pt.Type, pt.Str = models.FieldString, p.inBody(v.BytesV())
		default:
			return fmt.Errorf("field %q: unknown value kind %s", k, v.Kind())
		}
		if err := p.addPoint(pt, k, base); err != nil {
			return err
		}
	}
	if len(p.points) == first {
		return errors.New("no fields")
	}
	b, err := d.TimeBytes()
	if err != nil {
		return decodeMsg(err)
	}
	return p.endLine(first, b)
}

// addTag adds a line's tag to the scratch tags.
func (p *parser) addTag(k, v []byte) {
	n := len(p.tags)
	p.tags = append(p.tags, Tag{Key: p.internAt(2+2*n, k), Value: p.internAt(3+2*n, v)})
}

// series returns the line's tags, sorted, and the length of its series
// keys without the field part (Limits.checkSeries).
func (p *parser) series(metric string) ([]Tag, int, error) {
	tags, err := p.sortedTags()
	if err != nil {
		return nil, 0, err
	}
	base, err := p.lim.checkSeries(metric, tags)
	return tags, base, err
}

// addPoint adds the point of field k of the line (pt without its field and
// timestamp), whose series keys are base bytes before the field part.
func (p *parser) addPoint(pt Point, k []byte, base int) error {
	if p.max > 0 && len(p.points) >= p.max {
		return fmt.Errorf("%w: more than %d points in one batch", ErrTooManyPoints, p.max)
	}
	field := p.internAt(1, k)
	if err := p.lim.checkField(pt.Metric, pt.Tags, field, base); err != nil {
		return err
	}
	pt.Field = field
	p.points = append(p.points, pt)
	return nil
}

// endLine ends the line whose points (at least one) start at first: it
// stamps them with the timestamp b (nil: none, now) and asks o.Check about
// the line.
func (p *parser) endLine(first int, b []byte) error {
	ts, err := p.timestamp(b)
	if err != nil {
		return err
	}
	for i := first; i < len(p.points); i++ {
		p.points[i].TS = ts
	}
	if p.check != nil {
		if err := p.check(&p.points[first]); err != nil {
			return refused{err}
		}
	}
	return nil
}

// timestamp reads a line's timestamp b (nil: the line has none).
func (p *parser) timestamp(b []byte) (int64, error) {
	if b == nil {
		return p.now, nil
	}
	neg := b[0] == '-'
	digits := b
	if neg {
		digits = b[1:]
	}
	if len(digits) == 0 || len(digits) > 19 {
		return 0, fmt.Errorf("bad timestamp %q", b)
	}
	var u uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("bad timestamp %q", b)
		}
		u = u*10 + uint64(c-'0')
	}
	// 19 digits fit in a uint64; anything past MaxInt64 (or -MinInt64) is out of range.
	if u > math.MaxInt64 {
		return 0, fmt.Errorf("timestamp %q out of range", b)
	}
	ts := int64(u)
	if neg {
		ts = -ts
	}
	if ts > math.MaxInt64/p.mult || ts < math.MinInt64/p.mult {
		return 0, fmt.Errorf("timestamp %q out of range at this precision", b)
	}
	return ts * p.mult, nil
}

// sortedTags sorts the scratch tags by key (insertion sort: lines carry a handful
// of tags) and returns a copy that the line's points share. Consecutive lines of a
// batch usually carry the same tags, so the previous copy is reused when equal.
func (p *parser) sortedTags() ([]Tag, error) {
	tags := p.tags
	if len(tags) == 0 {
		return nil, nil
	}
	for i := 1; i < len(tags); i++ {
		for j := i; j > 0 && tags[j].Key < tags[j-1].Key; j-- {
			tags[j], tags[j-1] = tags[j-1], tags[j]
		}
	}
	for i := 1; i < len(tags); i++ {
		if tags[i].Key == tags[i-1].Key {
			return nil, fmt.Errorf("duplicate tag key %q", tags[i].Key)
		}
	}
	if slices.Equal(tags, p.last) {
		return p.last, nil
	}
	// The copies come from one slab per few hundred lines, not an
	// allocation per line.
	if cap(p.slab)-len(p.slab) < len(tags) {
		if p.into != nil {
			p.slab = p.into.slab(len(tags))
		} else {
			p.slab = make([]Tag, 0, max(tagSlab, len(tags)))
		}
	}
	n := len(p.slab)
	p.slab = append(p.slab, tags...)
	p.last = p.slab[n:len(p.slab):len(p.slab)]
	return p.last, nil
}

// decodeMsg drops the decoder's own "at line 1" (it only ever sees one line) and
// keeps the column.
func decodeMsg(err error) error {
	var de *lineprotocol.DecodeError
	if errors.As(err, &de) {
		return fmt.Errorf("column %d: %w", de.Column, de.Err)
	}
	return err
}
