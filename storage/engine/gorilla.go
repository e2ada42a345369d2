package engine

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/wire"
)

// A block holds one series' points over a time range, compressed the way
// Facebook's Gorilla does it (VLDB 2015): timestamps as delta-of-delta in
// variable-length buckets, values as the XOR with the previous value, with
// the meaningful bits only. Regular intervals cost one bit per timestamp and
// unchanged values one bit per value.
//
// Layout (all integers are uvarint/varint unless sized):
//
//	crc32c(rest) u32 LE | version 1 | count | minTS varint | maxTS-minTS |
//	value mode (0: XOR; 1+k: decimals with k digits) | bit stream
//
// That is a float series' block, the only kind before field types were
// kept. The blocks of the other types (integer, unsigned, boolean, string)
// are version 2, with their type after the version:
//
//	crc32c(rest) u32 LE | version 2 | type | count | minTS varint |
//	maxTS-minTS | value mode (intMode) | bit stream
//
// and their values, 64-bit integers (the int64, the uint64, 0 or 1, and a
// string's id in the shard's string heap, strs.go), as the delta-of-delta
// of the integers after the timestamps, like the decimal mode's: a steady
// counter, an unchanged boolean and the consecutive ids of a string series
// cost one bit a point, and every value round-trips exactly.
//
// The checksum covers everything after it, so a torn or truncated block never
// decodes to wrong points: it fails with ErrCorrupt.
const (
	blockVersion      = 1
	blockVersionTyped = 2
	intMode           = 0x80 // values as delta-of-delta integers (version 2)
)

// maxBlockPoints bounds one block, so decoding a block for a short range stays
// cheap and compaction has a target size.
const maxBlockPoints = 1024

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBlockCorrupt means a block failed its checksum or did not decode.
var ErrBlockCorrupt = fmt.Errorf("%w: block", ErrCorrupt)

type bitWriter struct {
	b     []byte
	nbits uint8 // free bits in the last byte (0 means a new byte is needed)
}

func (w *bitWriter) writeBit(bit bool) {
	if w.nbits == 0 {
		w.b = append(w.b, 0)
		w.nbits = 8
	}
	w.nbits--
	if bit {
		w.b[len(w.b)-1] |= 1 << w.nbits
	}
}

// writeBits writes the low n bits of v, most significant first.
func (w *bitWriter) writeBits(v uint64, n int) {
	for n > 0 {
		if w.nbits == 0 {
			w.b = append(w.b, 0)
			w.nbits = 8
		}
		take := min(n, int(w.nbits))
		chunk := (v >> uint(n-take)) & (1<<uint(take) - 1)
		w.nbits -= uint8(take)
		w.b[len(w.b)-1] |= byte(chunk << w.nbits)
		n -= take
	}
}

type bitReader struct {
	b   []byte
	pos uint64 // bit position
	err bool
}

// window returns the 64 bits from pos on, zero past the end; the first
// 57 at least are the stream's (pos%8 of the last byte's bits may be
// missing). Most reads are a window, a shift and an add.
func (r *bitReader) window() uint64 {
	i := r.pos >> 3
	var w uint64
	if i+8 <= uint64(len(r.b)) {
		w = binary.BigEndian.Uint64(r.b[i:])
	} else {
		for k := i; k < i+8; k++ {
			w <<= 8
			if k < uint64(len(r.b)) {
				w |= uint64(r.b[k])
			}
		}
	}
	return w << (r.pos & 7)
}

// zeros consumes the run of 0 bits at pos, up to max of them, and returns
// its length: in a delta-of-delta stream each is one more point at the same
// step.
// When there is none it returns the window at pos, for readDoDAt.
func (r *bitReader) zeros(max int) (int, uint64) {
	w := r.window()
	if int64(w) < 0 {
		return 0, w // the usual case where values change: a 1 first
	}
	n := min(bits.LeadingZeros64(w), 57, max)
	if left := uint64(len(r.b))*8 - min(r.pos, uint64(len(r.b))*8); uint64(n) > left {
		n = int(left)
	}
	r.pos += uint64(n)
	return n, w
}

// has says whether n more bits are in the stream; past it the reader fails.
func (r *bitReader) has(n uint64) bool {
	if r.pos+n > uint64(len(r.b))*8 {
		r.err = true
		return false
	}
	return true
}

func (r *bitReader) readBit() bool {
	if !r.has(1) {
		return false
	}
	bit := r.b[r.pos>>3]&(0x80>>(r.pos&7)) != 0
	r.pos++
	return bit
}

func (r *bitReader) readBits(n int) uint64 {
	if n == 0 || !r.has(uint64(n)) {
		return 0
	}
	if n <= 57 {
		v := r.window() >> (64 - n)
		r.pos += uint64(n)
		return v
	}
	hi := r.window() >> 32 // n > 57: two reads
	r.pos += 32
	return hi<<(n-32) | r.readBits(n-32)
}

// encodeBlock compresses points of type typ, which must be sorted by ts and
// unique, and appends the block to dst.
func encodeBlock(dst []byte, pts []memPoint, typ models.FieldType) []byte {
	start := len(dst)
	if typ == models.FieldFloat {
		dst = append(dst, 0, 0, 0, 0, blockVersion)
	} else {
		dst = append(dst, 0, 0, 0, 0, blockVersionTyped, byte(typ))
	}
	dst = binary.AppendUvarint(dst, uint64(len(pts)))
	if len(pts) == 0 {
		return sealBlock(dst, start)
	}
	minTS, maxTS := pts[0].ts, pts[len(pts)-1].ts
	dst = binary.AppendVarint(dst, minTS)
	dst = binary.AppendUvarint(dst, uint64(maxTS)-uint64(minTS))
	var scale int
	decimal, ints := false, typ != models.FieldFloat
	mode := byte(intMode)
	if !ints {
		scale, decimal = decimalScale(pts)
		mode = 0
		if decimal {
			mode = 1 + byte(scale)
		}
	}
	dst = append(dst, mode)
	w := bitWriter{b: dst}
	// Deltas and their differences use wrapping uint64 arithmetic so every
	// int64 range round-trips.
	var prevTS, prevDelta uint64 = uint64(minTS), 0
	prevVal := pts[0].bits
	if !decimal && !ints {
		w.writeBits(prevVal, 64)
	}
	lead, trail := -1, 0 // the current XOR window; -1: none yet
	for _, p := range pts[1:] {
		delta := uint64(p.ts) - prevTS
		w.writeDoD(int64(delta - prevDelta))
		prevTS, prevDelta = uint64(p.ts), delta
		if decimal || ints {
			continue
		}
		x := p.bits ^ prevVal
		prevVal = p.bits
		if x == 0 {
			w.writeBit(false)
			continue
		}
		l, t := bits.LeadingZeros64(x), bits.TrailingZeros64(x)
		if l > 31 {
			l = 31 // five bits hold the leading count
		}
		if lead >= 0 && l >= lead && t >= trail {
			w.writeBits(0b10, 2)
			w.writeBits(x>>uint(trail), 64-lead-trail)
			continue
		}
		lead, trail = l, t
		n := 64 - l - t
		w.writeBits(0b11, 2)
		w.writeBits(uint64(l), 5)
		w.writeBits(uint64(n-1), 6)
		w.writeBits(x>>uint(t), n)
	}
	switch {
	case decimal:
		// Exact decimals (integers, counters, two-decimal gauges) go as the
		// delta-of-delta of their scaled integers, after the timestamps:
		// steady counters and unchanged gauges cost one bit a point.
		pow := decimalPow[scale]
		w.writeIntDoDs(pts, func(bits uint64) uint64 { return uint64(int64(math.Round(math.Float64frombits(bits) * pow))) })
	case ints:
		w.writeIntDoDs(pts, func(bits uint64) uint64 { return bits })
	}
	return sealBlock(w.b, start)
}

// writeIntDoDs writes the first point's integer (of(bits)) in 64 bits, then
// the delta-of-delta of every next one.
func (w *bitWriter) writeIntDoDs(pts []memPoint, of func(uint64) uint64) {
	prev := of(pts[0].bits)
	w.writeBits(prev, 64)
	var prevD uint64
	for _, p := range pts[1:] {
		v := of(p.bits)
		d := v - prev
		w.writeDoD(int64(d - prevD))
		prev, prevD = v, d
	}
}

// writeDoD writes a delta-of-delta in Gorilla's variable-length buckets,
// with a 32-bit one added for nanosecond timestamps that are off by up to
// seconds.
func (w *bitWriter) writeDoD(dod int64) {
	switch {
	case dod == 0:
		w.writeBit(false)
	case dod >= -63 && dod <= 64:
		w.writeBits(0b10, 2)
		w.writeBits(uint64(dod+63), 7)
	case dod >= -255 && dod <= 256:
		w.writeBits(0b110, 3)
		w.writeBits(uint64(dod+255), 9)
	case dod >= -2047 && dod <= 2048:
		w.writeBits(0b1110, 4)
		w.writeBits(uint64(dod+2047), 12)
	case dod >= -(1<<31)+1 && dod <= 1<<31:
		w.writeBits(0b11110, 5)
		w.writeBits(uint64(dod+(1<<31)-1), 32)
	default:
		w.writeBits(0b11111, 5)
		w.writeBits(uint64(dod), 64)
	}
}

func (r *bitReader) readDoD() uint64 { return r.readDoDAt(r.window()) }

// readDoDAt is readDoD given the reader's window at its position.
func (r *bitReader) readDoDAt(w uint64) uint64 {
	// The bucket is the count of leading ones (at most 4 here; 5 is the
	// 64-bit case below); its prefix and value fit one window.
	if r.pos+37 <= uint64(len(r.b))*8 {
		switch ones := bits.LeadingZeros64(^w); ones {
		case 0:
			r.pos++
			return 0
		case 1:
			r.pos += 9
			return (w<<2)>>(64-7) - 63
		case 2:
			r.pos += 12
			return (w<<3)>>(64-9) - 255
		case 3:
			r.pos += 16
			return (w<<4)>>(64-12) - 2047
		case 4:
			r.pos += 37
			return (w<<5)>>(64-32) - (1 << 31) + 1
		}
	}
	switch {
	case !r.readBit():
		return 0
	case !r.readBit():
		return r.readBits(7) - 63
	case !r.readBit():
		return r.readBits(9) - 255
	case !r.readBit():
		return r.readBits(12) - 2047
	case !r.readBit():
		return r.readBits(32) - (1 << 31) + 1
	default:
		return r.readBits(64)
	}
}

var decimalPow = [...]float64{1, 10, 100, 1000}

// maxExactInt bounds scaled values so they convert to int64 and back exactly.
const maxExactInt = 1 << 53

// decimalScale finds the fewest decimals (up to 3) with which every value is
// an integer that converts back to exactly the same float64 bits.
func decimalScale(pts []memPoint) (int, bool) {
	for scale, pow := range decimalPow {
		ok := true
		for _, p := range pts {
			v := math.Float64frombits(p.bits)
			iv := math.Round(v * pow)
			if !(math.Abs(iv) < maxExactInt) || math.Float64bits(float64(int64(iv))/pow) != p.bits {
				ok = false
				break
			}
		}
		if ok {
			return scale, true
		}
	}
	return 0, false
}

func sealBlock(b []byte, start int) []byte {
	binary.LittleEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], castagnoli))
	return b
}

// blockHeader is what a block says about itself without decoding its points.
type blockHeader struct {
	count        int
	minTS, maxTS int64
	typ          models.FieldType
}

// parseBlock checks the block's checksum and reads its header; it returns the
// bit stream that follows.
func parseBlock(b []byte) (blockHeader, []byte, error) {
	if len(b) < 6 {
		return blockHeader{}, nil, fmt.Errorf("%w: %d bytes", ErrBlockCorrupt, len(b))
	}
	if crc32.Checksum(b[4:], castagnoli) != binary.LittleEndian.Uint32(b) {
		return blockHeader{}, nil, fmt.Errorf("%w: checksum mismatch", ErrBlockCorrupt)
	}
	d := wire.NewDecoder(b[4:])
	var h blockHeader
	switch d.Byte() {
	case blockVersion:
	case blockVersionTyped:
		h.typ = models.FieldType(d.Byte())
		if h.typ == models.FieldFloat || !h.typ.Valid() {
			return blockHeader{}, nil, fmt.Errorf("%w: unknown type %d", ErrBlockCorrupt, h.typ)
		}
	default:
		return blockHeader{}, nil, fmt.Errorf("%w: unknown version", ErrBlockCorrupt)
	}
	n := d.Uvarint()
	if n > 0 {
		h.minTS = d.Varint()
		h.maxTS = int64(uint64(h.minTS) + d.Uvarint())
	}
	// Each point past the first costs at least a bit; a mode byte follows.
	if d.Err() != nil || n > maxBlockPoints*64 || (n > 0 && (len(d.Rest()) < 1 || n-1 > uint64(len(d.Rest()))*8)) {
		return blockHeader{}, nil, fmt.Errorf("%w: bad header", ErrBlockCorrupt)
	}
	h.count = int(n)
	return h, d.Rest(), nil
}

// decodeXOR decodes count-1 more points of an XOR-mode stream, whose first
// point is dst[base], into dst (which has room for them).
func decodeXOR(r *bitReader, dst []memPoint, base, count int, prevTS, prevVal uint64) {
	var prevDelta uint64
	lead, trail := -1, 0
	for i := 1; i < count && !r.err; i++ {
		delta := prevDelta + r.readDoD()
		prevTS, prevDelta = prevTS+delta, delta
		if r.readBit() {
			if r.readBit() {
				lead = int(r.readBits(5))
				trail = 64 - lead - int(r.readBits(6)) - 1
				if trail < 0 {
					r.err = true
					return
				}
			} else if lead < 0 {
				r.err = true
				return
			}
			prevVal ^= r.readBits(64-lead-trail) << uint(trail)
		}
		dst[base+i] = memPoint{int64(prevTS), prevVal}
	}
}

// decodeDecimals reads the values of a decimal-mode stream into pts, whose
// timestamps are decoded.
func decodeDecimals(r *bitReader, pts []memPoint, pow float64) {
	decodeIntDoDs(r, pts, func(v uint64) uint64 { return math.Float64bits(float64(int64(v)) / pow) })
}

// decodeIntDoDs reads the values writeIntDoDs wrote into pts, as bits(v).
func decodeIntDoDs(r *bitReader, pts []memPoint, bits func(uint64) uint64) {
	v := r.readBits(64)
	var d uint64
	pts[0].bits = bits(v)
	for i := 1; i < len(pts) && !r.err; {
		z, w := r.zeros(len(pts) - i)
		if z > 0 {
			for k := range z {
				v += d
				pts[i+k].bits = bits(v)
			}
			i += z
			continue
		}
		d += r.readDoDAt(w)
		v += d
		pts[i].bits = bits(v)
		i++
	}
}

// decodeBlock appends the block's points to dst and says their type.
func decodeBlock(dst []memPoint, b []byte) ([]memPoint, models.FieldType, error) {
	h, stream, err := parseBlock(b)
	if err != nil {
		return dst, 0, err
	}
	if h.count == 0 {
		return dst, h.typ, nil
	}
	mode := stream[0]
	if h.typ == models.FieldFloat && mode > byte(len(decimalPow)) || h.typ != models.FieldFloat && mode != intMode {
		return dst, 0, fmt.Errorf("%w: unknown value mode %d", ErrBlockCorrupt, mode)
	}
	decimal := mode > 0
	// Room for the block at once (a header is checksummed, but cap what it
	// can make us allocate all the same).
	dst = slices.Grow(dst, min(h.count, maxBlockPoints))
	base := len(dst)
	r := bitReader{b: stream[1:]}
	prevTS, prevDelta := uint64(h.minTS), uint64(0)
	var prevVal uint64
	if !decimal {
		prevVal = r.readBits(64)
	}
	dst = append(slices.Grow(dst, h.count), memPoint{h.minTS, prevVal})
	if decimal {
		// Timestamps, then values, each a run of delta-of-deltas: a run of
		// 0 bits is that many points at the same step, decoded at once.
		for i := 1; i < h.count && !r.err; {
			z, w := r.zeros(h.count - i)
			if z > 0 {
				for range z {
					prevTS += prevDelta
					dst = append(dst, memPoint{int64(prevTS), 0})
				}
				i += z
				continue
			}
			prevDelta += r.readDoDAt(w)
			prevTS += prevDelta
			dst = append(dst, memPoint{int64(prevTS), 0})
			i++
		}
		switch {
		case r.err:
		case mode == intMode:
			decodeIntDoDs(&r, dst[base:], func(v uint64) uint64 { return v })
		default:
			decodeDecimals(&r, dst[base:], decimalPow[mode-1])
		}
	} else {
		dst = dst[:base+h.count]
		decodeXOR(&r, dst, base, h.count, prevTS, prevVal)
	}
	if r.err || dst[len(dst)-1].ts != h.maxTS {
		return dst[:base], 0, fmt.Errorf("%w: bad bit stream", ErrBlockCorrupt)
	}
	if h.typ == models.FieldBoolean {
		for _, p := range dst[base:] {
			if p.bits > 1 {
				return dst[:base], 0, fmt.Errorf("%w: boolean %d", ErrBlockCorrupt, p.bits)
			}
		}
	}
	return dst, h.typ, nil
}
