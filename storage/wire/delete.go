package wire

import (
	"encoding/binary"
	"fmt"

	"github.com/cairn-db/cairn/storage/lineproto"
)

// entryV3 is a delete entry: after the head, a Delete instead of points.
// It is a version of its own so that a node of a release before deletes
// (which reads versions 1 and 2) refuses it as an unknown version instead of
// misreading it as points.
const entryV3 = 3

// maxDeleteTags bounds the tag terms of a delete (InfluxQL's WHERE of a
// DELETE or DROP SERIES names a few).
const maxDeleteTags = 64

// Delete is what a delete entry removes: the points of every series of
// Metric whose tags hold each of Tags (sorted by key, keys distinct) with a
// ts in [Min, Max]. It applies where it stands in the log: points written by
// entries before it are gone, those of later entries are not.
type Delete struct {
	Metric   string
	Tags     []lineproto.Tag
	Min, Max int64
}

// Validate refuses a delete that names no measurement, an empty range,
// unsorted or repeated tag keys, or too many tags.
func (d *Delete) Validate() error {
	switch {
	case d.Metric == "":
		return fmt.Errorf("%w: a delete names no measurement", ErrBadDelete)
	case d.Min > d.Max:
		return fmt.Errorf("%w: empty time range [%d, %d]", ErrBadDelete, d.Min, d.Max)
	case len(d.Tags) > maxDeleteTags:
		return fmt.Errorf("%w: %d tag conditions, at most %d", ErrBadDelete, len(d.Tags), maxDeleteTags)
	}
	for i := 1; i < len(d.Tags); i++ {
		if d.Tags[i-1].Key >= d.Tags[i].Key {
			return fmt.Errorf("%w: tag keys not sorted or repeated (%q)", ErrBadDelete, d.Tags[i].Key)
		}
	}
	return nil
}

// appendDelete appends a version 3 entry's body.
func appendDelete(b []byte, d *Delete) []byte {
	b = binary.AppendUvarint(b, uint64(len(d.Metric)))
	b = append(b, d.Metric...)
	b = binary.AppendUvarint(b, uint64(len(d.Tags)))
	for _, t := range d.Tags {
		b = binary.AppendUvarint(b, uint64(len(t.Key)))
		b = append(b, t.Key...)
		b = binary.AppendUvarint(b, uint64(len(t.Value)))
		b = append(b, t.Value...)
	}
	b = binary.AppendVarint(b, d.Min)
	return binary.AppendVarint(b, d.Max)
}

// AppendDeleteEntry appends an encoded delete entry.
func AppendDeleteEntry(b []byte, txn, term uint64, d *Delete) []byte {
	return appendDelete(AppendHead(b, txn, term, entryV3), d)
}

// readDelete reads a version 3 entry's body.
func readDelete(d *Decoder) (*Delete, error) {
	del := &Delete{Metric: string(d.Bytes(d.Uvarint()))}
	n := d.Uvarint()
	if n > maxDeleteTags {
		return nil, fmt.Errorf("%w: delete of %d tags", ErrCorrupt, n)
	}
	for range n {
		k := string(d.Bytes(d.Uvarint()))
		del.Tags = append(del.Tags, lineproto.Tag{Key: k, Value: string(d.Bytes(d.Uvarint()))})
	}
	del.Min, del.Max = d.Varint(), d.Varint()
	if d.Err() != nil || len(d.Rest()) != 0 {
		return nil, fmt.Errorf("%w: bad delete entry", ErrCorrupt)
	}
	if err := del.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return del, nil
}
