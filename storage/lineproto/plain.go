package lineproto

import (
	"bytes"
	"math"
	"strconv"
	"unsafe"

	"github.com/cairn-db/cairn/models"
)

// The plain subset of line protocol is what load generators and most
// agents send: one entry per line, printable ASCII names without escapes,
// numbers, booleans and strings without escapes, and a timestamp right
// after one run of spaces. A body all of whose lines are plain is parsed by
// hand, without the decoder, whose byte-by-byte scanning with escape and
// UTF-8 handling was a quarter of a write's CPU (issue 21).
//
// The plain parser only ever accepts lines the decoder reads the same way:
// on anything else, including every error and every line the decoder would
// reject, it gives up and the body is parsed again the general way, so
// errors, dropped lines and their messages come from one place.

// Byte classes of plain names: printable ASCII (no space) without the
// backslash; a measurement may hold '=' (the decoder's rule), tag keys,
// tag values and field keys may not.
var plainMeasurement, plainName [256]bool

func init() {
	for c := 0x21; c <= 0x7e; c++ {
		plainMeasurement[c] = c != ',' && c != '\\'
		plainName[c] = plainMeasurement[c] && c != '='
	}
}

// parsePlain parses body when every line of it is plain, and says whether
// it did. When it did not, p's points are to be discarded.
func (p *parser) parsePlain(body []byte) bool {
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(line) > 0 && !p.plainLine(line) {
			return false
		}
	}
	return true
}

// scan returns the end of the run of class bytes that starts at i.
func scan(line []byte, i int, class *[256]bool) int {
	for i < len(line) && class[line[i]] {
		i++
	}
	return i
}

// plainLine parses one line (no newline in it) and says whether it was
// plain and good.
func (p *parser) plainLine(line []byte) bool {
	i := scan(line, 0, &plainMeasurement)
	if i == 0 || line[0] == '#' {
		return false // a comment, leading white space or no name
	}
	metric := p.internAt(0, line[:i])
	p.tags = p.tags[:0]
	for i < len(line) && line[i] == ',' {
		k := i + 1
		i = scan(line, k, &plainName)
		if i == k || i == len(line) || line[i] != '=' {
			return false
		}
		v := i + 1
		i = scan(line, v, &plainName)
		if i == v {
			return false
		}
		p.addTag(line[k:v-1], line[v:i])
	}
	if i == len(line) || line[i] != ' ' {
		return false
	}
	for i < len(line) && line[i] == ' ' {
		i++
	}
	tags, base, err := p.series(metric)
	if err != nil {
		return false
	}
	first := len(p.points)
	for {
		k := i
		i = scan(line, k, &plainName)
		if i == k || i+1 >= len(line) || line[i] != '=' {
			return false
		}
		key := line[k:i]
		pt := Point{Metric: metric, Tags: tags}
		if i++; line[i] == '"' {
			s := i + 1
			i = s
			for i < len(line) && line[i] >= 0x20 && line[i] <= 0x7e && line[i] != '"' && line[i] != '\\' {
				i++
			}
			if i == len(line) || line[i] != '"' {
				return false
			}
			pt.Type, pt.Str = models.FieldString, p.inBody(line[s:i])
			i++
		} else {
			v := i
			for i < len(line) && line[i] != ',' && line[i] != ' ' {
				i++
			}
			if !plainValue(&pt, line[v:i]) {
				return false
			}
		}
		if p.addPoint(pt, key, base) != nil {
			return false
		}
		if i == len(line) {
			return p.endLine(first, nil) == nil
		}
		if line[i] == ' ' {
			break
		}
		if line[i] != ',' {
			return false
		}
		i++
	}
	for i < len(line) && line[i] == ' ' {
		i++
	}
	ts := line[i:]
	if len(ts) == 0 {
		return false
	}
	for _, c := range ts {
		if c != '-' && (c < '0' || c > '9') {
			return false
		}
	}
	return p.endLine(first, ts) == nil
}

// plainValue sets pt's value from a number or boolean field value v, as the
// decoder reads it (the kind from v's first and last bytes, strconv for
// the number, no infinities or NaN), and says whether v was good.
func plainValue(pt *Point, v []byte) bool {
	if len(v) == 0 {
		return false
	}
	switch v[0] {
	case 't', 'T', 'f', 'F':
		switch string(v) {
		case "t", "T", "true", "True", "TRUE":
			pt.Type, pt.Int, pt.Value = models.FieldBoolean, 1, 1
		case "f", "F", "false", "False", "FALSE":
			pt.Type = models.FieldBoolean
		default:
			return false
		}
		return true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '.':
	default:
		return false
	}
	num := unsafe.String(&v[0], len(v)) // strconv keeps no reference but in errors, which are dropped
	switch v[len(v)-1] {
	case 'i':
		n, err := strconv.ParseInt(num[:len(num)-1], 10, 64)
		if err != nil {
			return false
		}
		pt.Type, pt.Int, pt.Value = models.FieldInteger, n, float64(n)
	case 'u':
		n, err := strconv.ParseUint(num[:len(num)-1], 10, 64)
		if err != nil {
			return false
		}
		pt.Type, pt.Int, pt.Value = models.FieldUnsigned, int64(n), float64(n)
	default:
		f, ok := shortDecimal(v)
		if !ok {
			var err error
			if f, err = strconv.ParseFloat(num, 64); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return false
			}
		}
		pt.Value = f
	}
	return true
}

// exactPow10 holds the powers of ten a float64 holds exactly.
var exactPow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// shortDecimal reads v when it is a short plain decimal: an optional '-',
// at most 15 digits with at most one '.' among or around them, and no
// exponent (what agents and load generators mostly send, "12.75"). Its
// digits then make an integer below 2^53 and its fraction a power of ten
// up to 1e15, both exact in a float64, so their quotient is v correctly
// rounded, bit for bit what strconv.ParseFloat returns (the fast path it
// takes itself after scanning for every other form of a number, which
// cost a write up to 4 % of its CPU). Anything else is left to ParseFloat.
func shortDecimal(v []byte) (float64, bool) {
	i, neg := 0, false
	if v[0] == '-' {
		i, neg = 1, true
	}
	var mant uint64
	digits, point := 0, -1 // point: the digits before the '.', -1 without one
	for ; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
			mant = mant*10 + uint64(c-'0')
			digits++
		case c == '.' && point < 0:
			point = digits
		default:
			return 0, false
		}
	}
	if digits == 0 || digits > 15 {
		return 0, false
	}
	f := float64(mant)
	if point >= 0 {
		f /= exactPow10[digits-point]
	}
	if neg {
		f = -f
	}
	return f, true
}
