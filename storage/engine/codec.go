package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/cairn-db/cairn/storage/wire"
)

// ErrCorrupt means an encoded entry or undo record could not be decoded.
var ErrCorrupt = wire.ErrCorrupt

// MarshalBinary encodes e as package wire does. It is the on-disk log format
// and the replication wire format.
func (e Entry) MarshalBinary() ([]byte, error) {
	return wire.Entry{TxnID: e.TxnID, Term: e.Term, Points: e.Points, Delete: e.Delete}.MarshalBinary()
}

func (e Entry) appendBinary(b []byte) []byte {
	if e.Delete != nil {
		return wire.AppendDeleteEntry(b, e.TxnID, e.Term, e.Delete)
	}
	return wire.AppendPoints(wire.AppendHead(b, e.TxnID, e.Term, wire.Version(e.Points)), e.Points, nil)
}

// UnmarshalBinary decodes what MarshalBinary produced. It never panics on bad
// input (entries may arrive over the network) and returns ErrCorrupt instead.
func (e *Entry) UnmarshalBinary(data []byte) error {
	var w wire.Entry
	if err := w.UnmarshalBinary(data); err != nil {
		return err
	}
	*e = Entry{TxnID: w.TxnID, Term: w.Term, Points: w.Points, Delete: w.Delete}
	return nil
}

// undoOp records what one point write replaced, so a truncated entry can be
// rolled back exactly even when it overwrote an older entry's value.
type undoOp struct {
	point   int // index into the entry's points
	hadPrev bool
	prev    uint64 // float64 bits of the replaced value
}

func appendUndo(b []byte, op undoOp) []byte {
	b = binary.AppendUvarint(b, uint64(op.point))
	if !op.hadPrev {
		return append(b, 0)
	}
	b = append(b, 1)
	return binary.LittleEndian.AppendUint64(b, op.prev)
}

func decodeUndo(data []byte, npoints int) ([]undoOp, error) {
	d := wire.NewDecoder(data)
	var ops []undoOp
	for len(d.Rest()) > 0 && d.Err() == nil {
		op := undoOp{point: int(d.Uvarint())}
		op.hadPrev = d.Byte() == 1
		if op.hadPrev {
			op.prev = d.Uint64()
		}
		if op.point < 0 || op.point >= npoints {
			d.Fail()
		}
		ops = append(ops, op)
	}
	if d.Err() != nil {
		return nil, fmt.Errorf("%w: bad undo record", ErrCorrupt)
	}
	return ops, nil
}

// u64Key encodes txn ids and meta values big-endian so bbolt orders them numerically.
func u64Key(v uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), v) }

// putTSKey writes ts big-endian with the sign bit flipped, so negative
// timestamps sort before positive ones and a time range is one cursor walk.
func putTSKey(dst []byte, ts int64) { binary.BigEndian.PutUint64(dst, uint64(ts)^(1<<63)) }

func tsFromKey(k []byte) int64 { return int64(binary.BigEndian.Uint64(k) ^ (1 << 63)) }
