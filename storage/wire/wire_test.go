package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// highCardinalityEntry is n points of distinct series (a new host tag value
// each, regions repeating), every string of it a table entry of its own
// unless repeated.
func highCardinalityEntry(txn uint64, n, hostBase int) Entry {
	e := Entry{TxnID: txn, Term: 3, Points: make([]lineproto.Point, n)}
	for i := range e.Points {
		e.Points[i] = lineproto.Point{Metric: "cpu", Field: "usage", TS: int64(txn)*10_000 + int64(i), Value: float64(i) / 3,
			Tags: []lineproto.Tag{{Key: "host", Value: fmt.Sprintf("h%d", hostBase+i)}, {Key: "region", Value: fmt.Sprintf("r%d", i%5)}}}
	}
	return e
}

// The encoder's string tables are pooled: an entry encoded after others
// (smaller, larger, than the table kept, at once in other goroutines) must
// encode to the same bytes and decode to itself.
func TestEntryEncodingReusesStringTables(t *testing.T) {
	sizes := []int{1, 625, 5000, tableKeep + 500, 40, 3000}
	want := make([][]byte, len(sizes))
	for i, n := range sizes {
		want[i], _ = highCardinalityEntry(uint64(i+1), n, i*100_000).MarshalBinary()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 3 {
				for j := range sizes {
					i := (j + g + r) % len(sizes)
					e := highCardinalityEntry(uint64(i+1), sizes[i], i*100_000)
					got, _ := e.MarshalBinary()
					if string(got) != string(want[i]) {
						errs <- fmt.Errorf("entry %d of %d points encoded differently after others", i, sizes[i])
						return
					}
					var back Entry
					if err := back.UnmarshalBinary(got); err != nil {
						errs <- err
						return
					}
					if back.TxnID != e.TxnID || len(back.Points) != len(e.Points) {
						errs <- fmt.Errorf("entry %d: header decoded as txn %d, %d points", i, back.TxnID, len(back.Points))
						return
					}
					for k := range e.Points {
						if back.Points[k].SeriesKey() != e.Points[k].SeriesKey() || back.Points[k].TS != e.Points[k].TS || back.Points[k].Value != e.Points[k].Value {
							errs <- fmt.Errorf("entry %d point %d decoded as %+v, want %+v", i, k, back.Points[k], e.Points[k])
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
}

// A repeated string is written once and referenced after: the table must
// hold every string of an entry however many there are.
func TestEntryEncodingReferencesRepeatsAtHighCardinality(t *testing.T) {
	e := highCardinalityEntry(1, 5000, 0)
	twice := Entry{TxnID: 1, Term: 3, Points: append(append([]lineproto.Point(nil), e.Points...), e.Points...)}
	once, _ := e.MarshalBinary()
	both, _ := twice.MarshalBinary()
	// The second copy of each point repeats only references: a few bytes
	// for the strings, 8 for the value, up to 3 for the ts.
	require.Less(t, len(both)-len(once), 5000*20, "second copies reference the table")
	var back Entry
	require.NoError(t, back.UnmarshalBinary(both))
	require.Len(t, back.Points, 10_000)
	require.Equal(t, e.Points[4999].SeriesKey(), back.Points[9999].SeriesKey())
}

// TestEntryEncodingRemembersRepeats: remembering each position's last string
// changes nothing in the bytes: they are what a plain string table writes.
func TestEntryEncodingRemembersRepeats(t *testing.T) {
	var e Entry
	for i := range 200 {
		tags := fmt.Sprintf("host=h%d,region=r%d", i/5, i%5)
		if i%7 == 0 {
			tags = fmt.Sprintf("region=r%d", i%3) // fewer tags: keys shift position
		}
		e.Points = append(e.Points, pt([]string{"cpu", "mem"}[i%9/8], tags, []string{"value", "idle"}[i%2], int64(i), float64(i)))
	}
	plain := func(e Entry) []byte {
		b := []byte{entryV1}
		b = binary.AppendUvarint(b, e.TxnID)
		b = binary.AppendUvarint(b, e.Term)
		b = binary.AppendUvarint(b, uint64(len(e.Points)))
		table := map[string]uint64{}
		str := func(s string) {
			if ref, ok := table[s]; ok {
				b = binary.AppendUvarint(b, ref)
				return
			}
			table[s] = uint64(len(table) + 1)
			b = append(b, 0)
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		for _, p := range e.Points {
			str(p.Metric)
			b = binary.AppendUvarint(b, uint64(len(p.Tags)))
			for _, t := range p.Tags {
				str(t.Key)
				str(t.Value)
			}
			str(p.Field)
			b = binary.AppendVarint(b, p.TS)
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.Value))
		}
		return b
	}
	got, err := e.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, plain(e), got)
	var back Entry
	require.NoError(t, back.UnmarshalBinary(got))
	require.Equal(t, e, back)
}

func TestEntryCodec(t *testing.T) {
	e := Entry{TxnID: 42, Term: 7, Points: []lineproto.Point{
		pt("cpu", "host=a,region=eu", "value", -3, 1.5),
		pt("cpu", "host=a,region=eu", "idle", 1<<62, -0.25),
		pt("mem", "", "value", 0, 0),
	}}
	b, err := e.MarshalBinary()
	require.NoError(t, err)
	var back Entry
	require.NoError(t, back.UnmarshalBinary(b))
	require.Equal(t, e, back)
	for i := range b { // every truncation is an error, never a panic
		require.ErrorIs(t, new(Entry).UnmarshalBinary(b[:i]), ErrCorrupt, "prefix %d", i)
	}
	require.ErrorIs(t, new(Entry).UnmarshalBinary(append(b, 0)), ErrCorrupt)
}

func FuzzEntryDecode(f *testing.F) {
	e := Entry{TxnID: 1, Term: 2, Points: []lineproto.Point{pt("cpu", "host=a", "value", 1, 1)}}
	b, _ := e.MarshalBinary()
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var e Entry
		if err := e.UnmarshalBinary(data); err != nil {
			require.True(t, errors.Is(err, ErrCorrupt))
			return
		}
		again, err := e.MarshalBinary()
		require.NoError(t, err)
		var e2 Entry
		require.NoError(t, e2.UnmarshalBinary(again))
		require.Equal(t, len(e.Points), len(e2.Points))
	})
}

func pt(metric, tags, field string, ts int64, v float64) lineproto.Point {
	p := lineproto.Point{Metric: metric, Field: field, TS: ts, Value: v}
	if tags != "" {
		for kv := range strings.SplitSeq(tags, ",") {
			k, v, _ := strings.Cut(kv, "=")
			p.Tags = append(p.Tags, lineproto.Tag{Key: k, Value: v})
		}
	}
	return p
}

// TestEntryCodecTyped: an entry holding integers, unsigned, booleans and
// strings is written as version 2 and decodes to the same typed points
// (integers past 2^53 exact); an all-float entry stays version 1, which
// release 0.1.0 reads (TestEntryEncodingRemembersRepeats pins its bytes).
func TestEntryCodecTyped(t *testing.T) {
	typed := func(p lineproto.Point, typ models.FieldType, bits uint64, s string) lineproto.Point {
		p.SetBits(typ, bits, s)
		return p
	}
	e := Entry{TxnID: 9, Term: 2, Points: []lineproto.Point{
		pt("system", "host=a", "load1", 1, 0.5),
		typed(pt("system", "host=a", "uptime", 1, 0), models.FieldInteger, 1<<53+1, ""),
		typed(pt("system", "host=a", "n_users", 1, 0), models.FieldInteger, uint64(math.MaxUint64), ""), // -1
		typed(pt("system", "host=a", "uptime_format", 1, 0), models.FieldString, 0, "1 day,  2:33"),
		typed(pt("system", "host=a", "empty", 1, 0), models.FieldString, 0, ""),
		typed(pt("disk", "host=a", "free", 1, 0), models.FieldUnsigned, math.MaxUint64, ""),
		typed(pt("net", "host=a", "up", 1, 0), models.FieldBoolean, 1, ""),
		typed(pt("net", "host=a", "down", 1, 0), models.FieldBoolean, 0, ""),
	}}
	b, err := e.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, byte(entryV2), b[0])
	var back Entry
	require.NoError(t, back.UnmarshalBinary(b))
	require.Equal(t, e, back)
	require.Equal(t, int64(1<<53+1), back.Points[1].Int)
	require.Equal(t, uint64(math.MaxUint64), uint64(back.Points[5].Int))
	for i := range b {
		require.ErrorIs(t, new(Entry).UnmarshalBinary(b[:i]), ErrCorrupt, "prefix %d", i)
	}

	floats, err := Entry{TxnID: 1, Term: 1, Points: e.Points[:1]}.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, byte(entryV1), floats[0])

	// A type byte or a boolean this version does not know is corrupt.
	one := Entry{TxnID: 1, Term: 1, Points: []lineproto.Point{e.Points[6]}}
	b, _ = one.MarshalBinary()
	bad := append([]byte(nil), b...)
	bad[len(bad)-1] = 2 // the boolean's byte
	require.ErrorIs(t, new(Entry).UnmarshalBinary(bad), ErrCorrupt)
	bad[len(bad)-2], bad[len(bad)-1] = 9, 0 // the type byte
	require.ErrorIs(t, new(Entry).UnmarshalBinary(bad), ErrCorrupt)
	bad[0] = 3
	require.ErrorIs(t, new(Entry).UnmarshalBinary(b[:0:0]), ErrCorrupt)
	require.ErrorIs(t, new(Entry).UnmarshalBinary(bad), ErrCorrupt)
}
