package wire

import "encoding/binary"

// Decoder reads varints and fixed-size fields with a sticky error, so that
// call sites stay linear: after the first short or bad read every read
// returns zero and Err is ErrCorrupt.
type Decoder struct {
	b   []byte
	err error
}

// NewDecoder reads b.
func NewDecoder(b []byte) Decoder { return Decoder{b: b} }

// Err is ErrCorrupt once a read failed.
func (d *Decoder) Err() error { return d.err }

// Rest is what is left to read.
func (d *Decoder) Rest() []byte { return d.b }

// Fail marks the input bad.
func (d *Decoder) Fail() {
	if d.err == nil {
		d.err = ErrCorrupt
	}
	d.b = nil
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if len(d.b) < 1 {
		d.Fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.Fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Varint reads a signed varint.
func (d *Decoder) Varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.Fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Uint64 reads 8 bytes little-endian.
func (d *Decoder) Uint64() uint64 {
	if len(d.b) < 8 {
		d.Fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// Bytes reads n bytes, which alias the input.
func (d *Decoder) Bytes(n uint64) []byte {
	if n > uint64(len(d.b)) {
		d.Fail()
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}
