package engine

import (
	"encoding/binary"
	"errors"
	"github.com/cairn-db/cairn/storage/wire"
	"hash/crc32"
)

// The write-ahead log's records (wal.go).

const (
	recEntry    byte = 1
	recTruncate byte = 2

	recHeader = 8
	// maxRecordBytes bounds a record read back from disk or from a snapshot.
	maxRecordBytes = 1 << 30
	// defaultSegmentBytes is the size past which the log starts a new
	// segment. Segments are the unit of removal, so a shard's log holds up
	// to one segment more than its retention bounds say. The next one is
	// made ahead, written full of zeros (walspare.go).
	defaultSegmentBytes = 8 << 20
	walDirName          = "log.d"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrWALCorrupt: a log segment other than the last one fails its checks
// (the last one may have a torn tail, which is cut).
var ErrWALCorrupt = errors.New("engine: write-ahead log corrupt")

// walRec is one record's header and where its payload lies.
type walRec struct {
	kind                byte
	inc                 uint64
	db                  string
	shard               int
	txn, term, prevTerm uint64
	pos                 walPos
}

// walPos locates a payload in a segment.
type walPos struct {
	seg *segment
	off int64
	n   int
}

// appendRecord frames a record: payload appends its bytes to dst. It returns
// the record and the payload's offset in it.
func appendRecord(dst []byte, r walRec, payload func([]byte) []byte) ([]byte, int) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0, r.kind)
	dst = binary.AppendUvarint(dst, r.inc)
	dst = binary.AppendUvarint(dst, uint64(len(r.db)))
	dst = append(dst, r.db...)
	dst = binary.AppendUvarint(dst, uint64(r.shard))
	dst = binary.AppendUvarint(dst, r.txn)
	dst = binary.AppendUvarint(dst, r.term)
	dst = binary.AppendUvarint(dst, r.prevTerm)
	off := len(dst) - start
	if payload != nil {
		dst = payload(dst)
	}
	body := dst[start+recHeader:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(body, crcTable))
	return dst, off
}

// parseRecord reads the record at the start of b: its header, the payload's
// offset in b and the record's length. ok is false when b does not start
// with a whole record whose checksum matches.
func parseRecord(b []byte) (r walRec, payloadOff, size int, ok bool) {
	if len(b) < recHeader {
		return r, 0, 0, false
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n == 0 || n > maxRecordBytes || n > len(b)-recHeader {
		return r, 0, 0, false
	}
	body := b[recHeader : recHeader+n]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return r, 0, 0, false
	}
	d := wire.NewDecoder(body)
	r.kind = d.Byte()
	r.inc = d.Uvarint()
	r.db = string(d.Bytes(d.Uvarint()))
	shard := d.Uvarint()
	r.txn, r.term, r.prevTerm = d.Uvarint(), d.Uvarint(), d.Uvarint()
	if d.Err() != nil || shard > 1<<31 || (r.kind != recEntry && r.kind != recTruncate) {
		return r, 0, 0, false
	}
	r.shard = int(shard)
	return r, recHeader + n - len(d.Rest()), recHeader + n, true
}
