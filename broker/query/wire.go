// Package query plans and evaluates the InfluxQL SELECT and SHOW statements
// Cairn answers, split the way the cluster runs them: a broker turns a parsed
// statement into a ShardRequest, every shard leader evaluates it over its own
// series (Evaluate) and returns partial aggregates per (group, field, time
// bucket) or raw points, and the broker merges the shards' answers into result
// rows (Merge). Parsing is influxql's; this package only reads its AST.
package query

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/wire"
)

// Sentinel errors, checked with errors.Is.
var (
	// ErrUnsupported: valid InfluxQL that Cairn does not run; the message names
	// the feature.
	ErrUnsupported = errors.New("not supported by Cairn's InfluxQL")
	// ErrBadQuery: a statement that cannot run as written (models.ErrBadQuery,
	// 400: one sentinel for every surface).
	ErrBadQuery = models.ErrBadQuery
	// ErrTooLarge: the answer would exceed a bound (points, buckets,
	// series). It is the one too-large sentinel, models.ErrTooLarge (413).
	ErrTooLarge = models.ErrTooLarge
	// ErrBadWire: a shard request or answer that does not decode.
	ErrBadWire = errors.New("query: bad wire data")
)

// Stats says which running statistics a shard keeps per bucket; a request
// asks only for those its aggregates need, so a mean ships count and sum only.
type Stats uint8

// The statistics of a Partial.
const (
	StatSum    Stats = 1 << iota // sum (sum, mean, stddev)
	StatMinMax                   // min and max with their times (min, max, spread)
	StatFirst                    // first value and time
	StatLast                     // last value and time
	StatM2                       // sum of squared deviations from the mean (stddev)
	StatValues                   // every value (median, percentile: exact)
)

// ShardRequest is what a broker asks every shard leader to evaluate.
type ShardRequest struct {
	Measurement string
	// Fields to read; empty with AllFields reads every field.
	Fields    []string
	AllFields bool
	// Cond is the tag condition as InfluxQL text ("" for none): tag =, !=,
	// =~, !~ joined by AND / OR. Time bounds are in Start and End.
	Cond       string
	Start, End int64 // inclusive, unix ns
	// Raw asks for the matching points rather than aggregates.
	Raw bool
	// Interval > 0 buckets by time: bucket start = floor((ts-Offset)/Interval)*Interval+Offset.
	// With Interval 0 every point falls in one bucket starting at Start.
	Interval, Offset int64
	// GroupBy lists the tag keys that group series; GroupAll groups by every tag.
	GroupBy  []string
	GroupAll bool
	Stats    Stats
	// MaxPoints bounds the raw points (Raw) or values kept (StatValues) a
	// shard returns; past it the shard answers ErrTooLarge.
	MaxPoints int
	// Bounds asks only for the time span of the points the request matches
	// (a streamed raw select lays its time windows out from it): one group
	// whose one field's one bucket holds the span in its FirstTS and LastTS.
	// Stats asks for first and last with it, which a node of the release
	// before answers by reading the points: the same span, the same way.
	Bounds bool `json:",omitempty"`
	// Rollup, when above 0, is the interval (ns) of the rollup level whose
	// cells answer the part of the range before RollupUntil (a multiple of
	// it); the raw points answer the rest (see PlanRollup). A node of the
	// release before reads the raw points of the whole range.
	Rollup      int64 `json:",omitempty"`
	RollupUntil int64 `json:",omitempty"`
}

// Group is one series group: its group-by tag values and per-field buckets.
type Group struct {
	Tags   []Tag // sorted by key
	Fields []FieldBuckets
}

// Tag is one key=value pair.
type Tag struct{ Key, Value string }

// RawSeries is one stored series' matching points (Raw requests). Values
// holds every point as a number (models.SeriesPoint.Value); a series of
// integers, unsigned or booleans also holds their exact values in Ints, one
// of strings its strings in Strs.
type RawSeries struct {
	Tags   []Tag // every tag of the series, sorted by key
	Field  string
	Type   models.FieldType
	TS     []int64
	Values []float64
	Ints   []int64
	Strs   []string
}

// ShardResult is one shard's answer.
type ShardResult struct {
	Groups []Group
	Raw    []RawSeries
}

// The wire format of a ShardResult is a compact binary one: a query over
// thousands of series returns millions of buckets, and a mean needs 2 numbers
// per bucket. Layout (uvarint counts and lengths, zigzag varint times, floats
// as 8 bytes little endian, strings as length + bytes):
//
//	version=2, stats, #groups, each: #tags, (key, value)*, #fields, each:
//	  field, first, step, #slots, #non-empty buckets, each: slots skipped
//	  since the previous one, count, then per stats bit in order: sum |
//	  min, minTS, max, maxTS | first, firstTS | last, lastTS | m2 |
//	  #values, values*
//	#raw, each: #tags, (key, value)*, field, #points, (ts delta, value)*
//
// Version 3 adds the field type (models.FieldType, a byte) after each
// field's name, in groups and raw series alike; a string field's first and
// last are strings, and a raw series' values are in their type (integer
// varint, unsigned uvarint, boolean a byte, string length + bytes). An
// answer holding floats only is written as version 2, which brokers of the
// release before read.
const (
	wireV2 = 2
	wireV3 = 3
)

// MarshalResult encodes r for the broker; st must be the request's Stats.
func MarshalResult(r *ShardResult, st Stats) []byte {
	b := make([]byte, 0, marshalSize(r, st))
	v3 := r.typed()
	version := byte(wireV2)
	if v3 {
		version = wireV3
	}
	b = append(b, version, byte(st))
	b = binary.AppendUvarint(b, uint64(len(r.Groups)))
	for _, g := range r.Groups {
		b = appendTags(b, g.Tags)
		b = binary.AppendUvarint(b, uint64(len(g.Fields)))
		for _, f := range g.Fields {
			b = appendString(b, f.Field)
			if v3 {
				b = append(b, byte(f.Type))
			}
			strs := f.Type == models.FieldString
			b = binary.AppendVarint(b, f.First)
			b = binary.AppendUvarint(b, uint64(f.Step))
			b = binary.AppendUvarint(b, uint64(len(f.Parts)))
			full := 0
			for i := range f.Parts {
				if f.Parts[i].Count > 0 {
					full++
				}
			}
			b = binary.AppendUvarint(b, uint64(full))
			next := 0 // the slot after the previous non-empty one
			for i := range f.Parts {
				k := &f.Parts[i]
				if k.Count == 0 {
					continue
				}
				b = binary.AppendUvarint(b, uint64(i-next))
				next = i + 1
				b = binary.AppendUvarint(b, uint64(k.Count))
				if st&StatSum != 0 {
					b = appendFloat(b, k.Sum)
				}
				if !NeedsExtra(st) {
					continue
				}
				x := k.X
				if x == nil {
					x = &Extra{}
				}
				if st&StatMinMax != 0 {
					b = appendFloat(b, x.Min)
					b = binary.AppendVarint(b, x.MinTS)
					b = appendFloat(b, x.Max)
					b = binary.AppendVarint(b, x.MaxTS)
				}
				if st&StatFirst != 0 {
					b = appendFirstLast(b, strs, x.First, x.FirstS)
					b = binary.AppendVarint(b, x.FirstTS)
				}
				if st&StatLast != 0 {
					b = appendFirstLast(b, strs, x.Last, x.LastS)
					b = binary.AppendVarint(b, x.LastTS)
				}
				if st&StatM2 != 0 {
					b = appendFloat(b, x.M2)
				}
				if st&StatValues != 0 {
					b = binary.AppendUvarint(b, uint64(len(x.Values)))
					for _, v := range x.Values {
						b = appendFloat(b, v)
					}
				}
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(len(r.Raw)))
	for _, s := range r.Raw {
		b = appendTags(b, s.Tags)
		b = appendString(b, s.Field)
		if v3 {
			b = append(b, byte(s.Type))
		}
		b = binary.AppendUvarint(b, uint64(len(s.TS)))
		prev := int64(0)
		for i, ts := range s.TS {
			b = binary.AppendVarint(b, ts-prev)
			prev = ts
			b = appendRawValue(b, &s, i)
		}
	}
	return b
}

func appendFirstLast(b []byte, strs bool, f float64, s string) []byte {
	if strs {
		return appendString(b, s)
	}
	return appendFloat(b, f)
}

// marshalSize estimates MarshalResult's output, so it is written without
// growing its buffer over and over.
func marshalSize(r *ShardResult, st Stats) int {
	per := minBucketBytes(st) + 8 // varints run longer than their minimum
	n := 64
	for _, g := range r.Groups {
		n += 16
		for _, t := range g.Tags {
			n += len(t.Key) + len(t.Value) + 4
		}
		for _, f := range g.Fields {
			n += len(f.Field) + 32 + len(f.Parts)*per
		}
	}
	for _, s := range r.Raw {
		n += 32 + len(s.Field) + len(s.TS)*12
	}
	return n
}

func appendTags(b []byte, tags []Tag) []byte {
	b = binary.AppendUvarint(b, uint64(len(tags)))
	for _, t := range tags {
		b = appendString(b, t.Key)
		b = appendString(b, t.Value)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// UnmarshalResult decodes a shard's answer. It trusts nothing: every count is
// checked against the bytes left, so a corrupt answer cannot allocate wildly.
func UnmarshalResult(data []byte) (*ShardResult, error) {
	d := decoder{Decoder: wire.NewDecoder(data)}
	version := d.Byte()
	if version != wireV2 && version != wireV3 {
		return nil, fmt.Errorf("%w: version %d", ErrBadWire, version)
	}
	v3 := version == wireV3
	st := Stats(d.Byte())
	r := &ShardResult{}
	ng := d.count(2)
	for i := 0; i < ng && d.Err() == nil; i++ {
		g := Group{Tags: d.tags()}
		nf := d.count(2)
		for j := 0; j < nf && d.Err() == nil; j++ {
			f := FieldBuckets{Field: d.string()}
			if v3 {
				f.Type = d.fieldType()
			}
			strs := f.Type == models.FieldString
			f.First, f.Step = d.Varint(), int64(d.Uvarint())
			minBytes := minBucketBytes(st)
			if strs { // a string's first and last take a byte at least, not 8
				minBytes -= 7 * bits.OnesCount8(uint8(st&(StatFirst|StatLast)))
			}
			slots, nb := d.Uvarint(), d.count(minBytes)
			if d.slots += slots; d.Err() == nil && (f.Step < 0 || f.Step == 0 && slots > 1 || slots > MaxBuckets || d.slots > uint64(maxCells(st)) || uint64(nb) > slots) {
				d.fail("bucket slots")
			}
			if d.Err() != nil {
				break
			}
			f.Parts = make([]Partial, slots)
			var extras []Extra // one allocation backs every bucket's Extra
			if NeedsExtra(st) {
				extras = make([]Extra, nb)
			}
			at := uint64(0)
			for k := 0; k < nb && d.Err() == nil; k++ {
				skip := d.Uvarint()
				if skip >= slots-at {
					d.fail("bucket slot")
					break
				}
				at += skip
				bk := &f.Parts[at]
				at++
				bk.Count = int64(d.Uvarint())
				if bk.Count <= 0 {
					d.fail("bucket count")
					break
				}
				if st&StatSum != 0 {
					bk.Sum = d.float()
				}
				if extras == nil {
					continue
				}
				x := &extras[k]
				bk.X = x
				if st&StatMinMax != 0 {
					x.Min, x.MinTS, x.Max, x.MaxTS = d.float(), d.Varint(), d.float(), d.Varint()
				}
				if st&StatFirst != 0 {
					x.First, x.FirstS = d.firstLast(strs)
					x.FirstTS = d.Varint()
				}
				if st&StatLast != 0 {
					x.Last, x.LastS = d.firstLast(strs)
					x.LastTS = d.Varint()
				}
				if st&StatM2 != 0 {
					x.M2 = d.float()
				}
				if st&StatValues != 0 {
					nv := d.count(8)
					x.Values = make([]float64, nv)
					for v := range x.Values {
						x.Values[v] = d.float()
					}
				}
			}
			g.Fields = append(g.Fields, f)
		}
		r.Groups = append(r.Groups, g)
	}
	nr := d.count(3)
	for i := 0; i < nr && d.Err() == nil; i++ {
		s := RawSeries{Tags: d.tags(), Field: d.string()}
		if v3 {
			s.Type = d.fieldType()
		}
		minPoint := 9
		if s.Type != models.FieldFloat {
			minPoint = 2
		}
		np := d.count(minPoint)
		s.TS, s.Values = make([]int64, np), make([]float64, np)
		switch s.Type {
		case models.FieldFloat:
		case models.FieldString:
			s.Strs = make([]string, np)
		default:
			s.Ints = make([]int64, np)
		}
		prev := int64(0)
		for j := 0; j < np && d.Err() == nil; j++ {
			s.TS[j] = prev + d.Varint()
			prev = s.TS[j]
			d.rawValue(&s, j)
		}
		r.Raw = append(r.Raw, s)
	}
	if d.Err() == nil && len(d.Rest()) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrBadWire, len(d.Rest()))
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return r, nil
}

// minBucketBytes is the smallest encoding of a bucket with statistics st,
// which bounds what a bucket count can make the decoder allocate.
func minBucketBytes(st Stats) int {
	n := 2 // start, count
	for _, f := range []struct {
		s    Stats
		size int
	}{{StatSum, 8}, {StatMinMax, 18}, {StatFirst, 9}, {StatLast, 9}, {StatM2, 8}, {StatValues, 1}} {
		if st&f.s != 0 {
			n += f.size
		}
	}
	return n
}

// decoder reads a shard's answer over storage/wire's Decoder (sticky
// error, bounds-checked reads), naming what it was reading when it failed
// and counting the bucket slots it allocated.
type decoder struct {
	wire.Decoder
	why   string // what the first failed check was about ("" : a short read)
	slots uint64 // bucket slots allocated so far
}

// fail marks the answer bad because of what.
func (d *decoder) fail(what string) {
	if d.Err() == nil {
		d.why = what
	}
	d.Fail()
}

// err is the decoding error, wrapping ErrBadWire; nil while reads succeed.
func (d *decoder) err() error {
	if d.Err() == nil {
		return nil
	}
	if d.why == "" {
		return fmt.Errorf("%w: truncated answer", ErrBadWire)
	}
	return fmt.Errorf("%w: bad %s", ErrBadWire, d.why)
}

// count reads a length whose items take at least minSize bytes each.
func (d *decoder) count(minSize int) int {
	n := d.Uvarint()
	if n > uint64(len(d.Rest())/minSize) {
		d.fail("list length")
		return 0
	}
	return int(n)
}

func (d *decoder) float() float64 { return math.Float64frombits(d.Uint64()) }

func (d *decoder) string() string { return string(d.Bytes(uint64(d.count(1)))) }

func (d *decoder) tags() []Tag {
	n := d.count(2)
	tags := make([]Tag, n)
	for i := range tags {
		tags[i] = Tag{Key: d.string(), Value: d.string()}
	}
	return tags
}
