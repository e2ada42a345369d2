// Package lineproto turns an Influx line-protocol body into Cairn points and owns
// the canonical series key and the series-to-shard hash that every node must agree on.
package lineproto

import (
	"errors"
	"fmt"
	"math"

	"github.com/cairn-db/cairn/models"
)

// Point is one field value of one line: a line with three fields yields three points.
//
// Value is a float's value; the other types keep theirs exactly in Int
// (integer; unsigned as uint64 bits; boolean 1 or 0) or Str, with Value set
// to the number they stand for (a string's 0) so that whatever adds values
// up reads one field.
type Point struct {
	Metric string
	Tags   []Tag // sorted by key; points parsed from the same line share this slice
	Field  string
	Value  float64
	TS     int64 // unix nanoseconds
	Int    int64
	Str    string
	Type   models.FieldType
}

// Bits is the point's exact value in 64 bits (float64 bits for a float,
// Int otherwise; 0 for a string), as models.TypedPoint takes it back.
func (p *Point) Bits() uint64 {
	switch p.Type {
	case models.FieldFloat:
		return math.Float64bits(p.Value)
	case models.FieldString:
		return 0
	}
	return uint64(p.Int)
}

// SetBits sets the value of type t from its exact bits (and s for a
// string): Bits' inverse.
func (p *Point) SetBits(t models.FieldType, bits uint64, s string) {
	sp := models.TypedPoint(0, t, bits, s)
	p.Type, p.Value, p.Int, p.Str = t, sp.Value, sp.Int, sp.Str
}

// Tag is one key=value pair of a series.
type Tag struct{ Key, Value string }

// ErrBadPrecision is returned by Parse for a precision other than "", ns, us, ms or s.
var ErrBadPrecision = errors.New("lineproto: bad precision")

// ErrTooManyPoints is returned by ParseBatch for a body over its points limit.
var ErrTooManyPoints = errors.New("lineproto: too many points")

// SeriesKey returns the canonical key "metric,k1=v1,k2=v2#field" used for hashing
// and storage. Tags must be sorted (Parse guarantees it). Backslash, ',', '=' and
// '#' inside names and values are escaped with a backslash so that the key is
// unambiguous and ParseSeriesKey can invert it.
func (p Point) SeriesKey() string {
	n := len(p.Metric) + len(p.Field) + 1
	for _, t := range p.Tags {
		n += len(t.Key) + len(t.Value) + 2
	}
	b := make([]byte, 0, n+4)
	b = AppendSeriesKey(b, p.Metric, p.Tags, p.Field)
	return string(b)
}

// AppendSeriesKey appends the series key of (metric, tags, field) to dst; it is
// the allocation-free form of Point.SeriesKey.
func AppendSeriesKey(dst []byte, metric string, tags []Tag, field string) []byte {
	dst = appendEscaped(dst, metric)
	for _, t := range tags {
		dst = append(dst, ',')
		dst = appendEscaped(dst, t.Key)
		dst = append(dst, '=')
		dst = appendEscaped(dst, t.Value)
	}
	dst = append(dst, '#')
	return appendEscaped(dst, field)
}

// AppendMetricPrefix appends the escaped metric name: every series key of that
// metric starts with it followed by ',' (tagged series) or '#' (untagged series).
func AppendMetricPrefix(dst []byte, metric string) []byte { return appendEscaped(dst, metric) }

func needsEscape(c byte) bool { return c == '\\' || c == ',' || c == '=' || c == '#' }

// appendEscaped appends s with a backslash before each byte that needs
// one; the runs between them (usually all of s) are copied whole, not a
// byte at a time.
func appendEscaped(dst []byte, s string) []byte {
	from := 0
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			dst = append(append(dst, s[from:i]...), '\\')
			from = i
		}
	}
	return append(dst, s[from:]...)
}

// ParseSeriesKey inverts SeriesKey.
func ParseSeriesKey(key string) (metric string, tags []Tag, field string, err error) {
	metric, rest, sep, err := cutUnescaped(key, ",#")
	if err != nil {
		return "", nil, "", err
	}
	for sep == ',' {
		var k, v string
		k, rest, sep, err = cutUnescaped(rest, "=")
		if err != nil {
			return "", nil, "", err
		}
		if sep != '=' {
			return "", nil, "", fmt.Errorf("lineproto: series key %q: tag without '='", key)
		}
		v, rest, sep, err = cutUnescaped(rest, ",#")
		if err != nil {
			return "", nil, "", err
		}
		tags = append(tags, Tag{Key: k, Value: v})
	}
	if sep != '#' {
		return "", nil, "", fmt.Errorf("lineproto: series key %q: no field", key)
	}
	field, _, sep, err = cutUnescaped(rest, "")
	if err != nil || sep != 0 {
		return "", nil, "", fmt.Errorf("lineproto: series key %q: bad field", key)
	}
	return metric, tags, field, nil
}

// cutUnescaped returns the unescaped text of s up to the first unescaped byte in
// seps, the remainder after it, and the separator found (0 at end of input).
func cutUnescaped(s, seps string) (string, string, byte, error) {
	var buf []byte // only allocated when the token holds an escape
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' {
			if i+1 >= len(s) || !needsEscape(s[i+1]) {
				return "", "", 0, fmt.Errorf("lineproto: series key %q: bad escape", s)
			}
			if buf == nil {
				buf = append(make([]byte, 0, len(s)), s[:i]...)
			}
			buf = append(buf, s[i+1])
			i++
			continue
		}
		for j := 0; j < len(seps); j++ {
			if c == seps[j] {
				return tokenText(s[:i], buf), s[i+1:], c, nil
			}
		}
		if needsEscape(c) {
			return "", "", 0, fmt.Errorf("lineproto: series key %q: unescaped %q", s, c)
		}
		if buf != nil {
			buf = append(buf, c)
		}
	}
	return tokenText(s, buf), "", 0, nil
}

func tokenText(raw string, unescaped []byte) string {
	if unescaped != nil {
		return string(unescaped)
	}
	return raw
}

// ShardOf maps a series key to a shard in [0, numShards) with FNV-1a 64 modulo
// numShards. This mapping is stable forever: data already written lives on the
// shard it names, so changing the hash would strand it. numShards < 1 yields 0.
func ShardOf(seriesKey string, numShards int) int { return shardOf(seriesKey, numShards) }

// ShardOfKey is ShardOf of a series key held in bytes (AppendSeriesKey's).
func ShardOfKey(seriesKey []byte, numShards int) int { return shardOf(seriesKey, numShards) }

// ShardOfSeries is ShardOfKey of the series key of (metric, tags, field)
// without building the key: the hash goes over the key's bytes as
// AppendSeriesKey would write them. A broker hashes every point of a write.
func ShardOfSeries(metric string, tags []Tag, field string, numShards int) int {
	if numShards <= 1 {
		return 0
	}
	h := fnvEscaped(offset64, metric)
	for _, t := range tags {
		h = fnvEscaped((h^',')*prime64, t.Key)
		h = fnvEscaped((h^'=')*prime64, t.Value)
	}
	h = fnvEscaped((h^'#')*prime64, field)
	return int(h % uint64(numShards))
}

// FNV-1a 64.
const (
	offset64 = 14695981039346656037
	prime64  = 1099511628211
)

// fnvEscaped goes on with hash h over s as appendEscaped writes it.
func fnvEscaped(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			h = (h ^ '\\') * prime64
		}
		h = (h ^ uint64(s[i])) * prime64
	}
	return h
}

func shardOf[K string | []byte](seriesKey K, numShards int) int {
	if numShards <= 1 {
		return 0
	}
	h := uint64(offset64)
	for i := 0; i < len(seriesKey); i++ {
		h ^= uint64(seriesKey[i])
		h *= prime64
	}
	return int(h % uint64(numShards))
}
