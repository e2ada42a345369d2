package engine

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"unsafe"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"
)

// typed is pt of a value of type t given by its exact bits (and s).
func typed(metric, tags, field string, ts int64, t models.FieldType, bits uint64, s string) lineproto.Point {
	p := pt(metric, tags, field, ts, 0)
	p.SetBits(t, bits, s)
	return p
}

// telegrafSystem is a few points of every type, as Telegraf's system, disk
// and net inputs send them, including integers past 2^53 and strings with
// repeats, commas and newlines.
func telegrafSystem(ts int64, i int) []lineproto.Point {
	return []lineproto.Point{
		pt("system", "host=a", "load1", ts, 0.25*float64(i)),
		typed("system", "host=a", "uptime", ts, models.FieldInteger, uint64(1<<53+1+i), ""),
		typed("system", "host=a", "n_users", ts, models.FieldInteger, uint64(int64(-i)), ""),
		typed("system", "host=a", "uptime_format", ts, models.FieldString, 0, []string{"1 day,  2:33", "1 day,  2:33", "a\nb", ""}[i%4]),
		typed("disk", "host=a,path=/", "free", ts, models.FieldUnsigned, math.MaxUint64-uint64(i), ""),
		typed("net", "host=a", "up", ts, models.FieldBoolean, uint64(i%2), ""),
	}
}

// queryAll is every point of metric by field.
func queryAll(t *testing.T, s Shard, metric string) map[string][]SeriesPoint {
	t.Helper()
	got := map[string][]SeriesPoint{}
	series, err := s.Query(metric, nil, math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	for _, sr := range series {
		field := sr.Tags[FieldTag]
		if field == "" {
			field = DefaultField
		}
		got[field] = sr.Points
	}
	var scanned = map[string][]SeriesPoint{}
	require.NoError(t, s.(*boltShard).Scan(metric, nil, math.MinInt64, math.MaxInt64, func(string) bool { return true },
		func(key string, pts []SeriesPoint) error {
			_, _, field, err := lineproto.ParseSeriesKey(key)
			require.NoError(t, err)
			scanned[field] = append([]SeriesPoint(nil), pts...)
			return nil
		}))
	require.Equal(t, got, scanned, "Query and Scan agree")
	return got
}

// TestTypedValuesRoundTrip: integers (past 2^53), unsigned, booleans and
// strings come back with their type and exact value from the memtable,
// from blocks after a flush (points merged into flushed blocks too), after
// a compaction and after a restart.
func TestTypedValuesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, manual...)
	var want []lineproto.Point
	for i := range 8 {
		pts := telegrafSystem(int64(i+1)*10, i)
		want = append(want, pts...)
		apply(t, s, 1, pts...)
		if i == 3 {
			flushNow(t, s)
		}
	}
	// An overwrite of a flushed string and integer.
	over := []lineproto.Point{
		typed("system", "host=a", "uptime_format", 20, models.FieldString, 0, "rewritten"),
		typed("system", "host=a", "uptime", 20, models.FieldInteger, math.MaxInt64, ""),
	}
	apply(t, s, 1, over...)
	expect := func() map[string]map[string][]SeriesPoint {
		out := map[string]map[string][]SeriesPoint{}
		for _, p := range append(append([]lineproto.Point(nil), want...), over...) {
			if out[p.Metric] == nil {
				out[p.Metric] = map[string][]SeriesPoint{}
			}
			sp := models.TypedPoint(p.TS, p.Type, p.Bits(), p.Str)
			pts := out[p.Metric][p.Field]
			if n := len(pts); n > 0 && pts[n-1].TS == p.TS {
				pts[n-1] = sp
			} else if p.TS == 20 && len(pts) > 1 {
				pts[1] = sp
			} else {
				pts = append(pts, sp)
			}
			out[p.Metric][p.Field] = pts
		}
		return out
	}()
	check := func(s Shard, when string) {
		for metric, fields := range expect {
			require.Equal(t, fields, queryAll(t, s, metric), "%s: %s", when, metric)
		}
		sys := queryAll(t, s, "system")
		require.Equal(t, int64(math.MaxInt64), sys["uptime"][1].Int, when)
		require.Equal(t, int64(1<<53+1), sys["uptime"][0].Int, when)
		require.Equal(t, "rewritten", sys["uptime_format"][1].Str, when)
		require.Equal(t, "a\nb", sys["uptime_format"][2].Str, when)
		require.Equal(t, models.FieldBoolean, queryAll(t, s, "net")["up"][0].Type, when)
	}
	check(s, "memtable and blocks")
	flushNow(t, s)
	check(s, "flushed")
	require.NoError(t, s.(Compacter).Compact())
	check(s, "compacted")
	require.Equal(t, map[string]models.FieldType{"load1": models.FieldFloat, "uptime": models.FieldInteger,
		"n_users": models.FieldInteger, "uptime_format": models.FieldString}, s.FieldTypes("system"))

	require.NoError(t, e.Close())
	e, s = openShardAt(t, dir, manual...)
	check(s, "reopened")
	require.Equal(t, models.FieldUnsigned, s.FieldTypes("disk")["free"])

	// Truncating the overwrite restores the flushed values it replaced.
	require.NoError(t, s.TruncateAfter(s.LastTxnID()-1))
	sys := queryAll(t, s, "system")
	require.Equal(t, "1 day,  2:33", sys["uptime_format"][1].Str)
	require.Equal(t, int64(1<<53+2), sys["uptime"][1].Int)
	require.NoError(t, e.Close())
}

// TestAdmitTypes: a point whose field the shard holds with another type is
// refused with InfluxDB's message, the batch's other points admitted; the
// types hold across a flush and a restart, and a field of a file written
// before types were kept (no ftype record) is a float.
func TestAdmitTypes(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, manual...)
	apply(t, s, 1, pt("m", "h=a", "x", 1, 1), typed("m", "h=a", "n", 1, models.FieldInteger, 5, ""))
	flushNow(t, s)
	// Forget the saved types, as a file of the float-only releases has none.
	require.NoError(t, s.(*boltShard).db.Update(func(tx *bolt.Tx) error {
		require.NoError(t, tx.DeleteBucket(bucketFTypes))
		_, err := tx.CreateBucket(bucketFTypes)
		return err
	}))
	require.NoError(t, e.Close())
	e, s = openShardAt(t, dir, manual...)
	require.Equal(t, map[string]models.FieldType{"x": models.FieldFloat, "n": models.FieldFloat}, s.FieldTypes("m"))
	apply(t, s, 1, typed("m", "h=a", "s", 2, models.FieldString, 0, "ok"))

	batch := []lineproto.Point{
		typed("m", "h=b", "x", 3, models.FieldInteger, 3, ""), // x is a float
		pt("m", "h=b", "x", 3, 3),
		typed("m", "h=b", "s", 3, models.FieldBoolean, 1, ""), // s is a string
		typed("m", "h=b", "new", 3, models.FieldBoolean, 1, ""),
		pt("m", "h=b", "new", 4, 1), // claimed a boolean by the point before
	}
	kept, refused, first := s.AdmitTypes(batch)
	require.Equal(t, 3, refused)
	require.Equal(t, []lineproto.Point{batch[1], batch[3]}, kept)
	require.ErrorIs(t, first, ErrFieldTypeConflict)
	require.ErrorIs(t, first, models.ErrBadInput)
	require.EqualError(t, first, `field type conflict: input field "x" on measurement "m" is type integer, already exists as type float`)
	all, refused, first := s.AdmitTypes(batch[1:2])
	require.Equal(t, batch[1:2], all)
	require.Zero(t, refused)
	require.NoError(t, first)
	apply(t, s, 1, kept...)
	flushNow(t, s)
	require.NoError(t, e.Close())
	_, s = openShardAt(t, dir, manual...)
	require.Equal(t, map[string]models.FieldType{"x": models.FieldFloat, "n": models.FieldFloat, "s": models.FieldString,
		"new": models.FieldBoolean}, s.FieldTypes("m"))
	_, refused, _ = s.AdmitTypes([]lineproto.Point{typed("m", "h=c", "s", 5, models.FieldFloat, 0, "")})
	require.Equal(t, 1, refused)
}

// TestAdmitTypesFieldOfAnotherMetric: a field name repeated from the point
// before, under another measurement, is that measurement's field, with a
// type of its own (the field types' cursor remembers the last field found).
func TestAdmitTypesFieldOfAnotherMetric(t *testing.T) {
	_, s := openShardAt(t, t.TempDir(), manual...)
	apply(t, s, 1, pt("a", "h=a", "v", 1, 1), typed("b", "h=a", "v", 1, models.FieldInteger, 1, ""))
	batch := []lineproto.Point{
		pt("a", "h=b", "v", 2, 2),
		pt("b", "h=b", "v", 2, 2), // b's v is an integer
		typed("b", "h=b", "v", 3, models.FieldInteger, 3, ""),
		typed("a", "h=b", "v", 3, models.FieldInteger, 3, ""), // a's v is a float
		pt("a", "h=b", "v", 4, 4),
		pt("c", "h=b", "v", 4, 4), // new: claimed a float
		typed("c", "h=b", "v", 5, models.FieldInteger, 5, ""),
	}
	kept, refused, _ := s.AdmitTypes(batch)
	require.Equal(t, 3, refused)
	require.Equal(t, []lineproto.Point{batch[0], batch[2], batch[4], batch[5]}, kept)
}

// TestTypedBlocks: a block of each non-float type round-trips its exact
// 64-bit values (extremes, steps, repeats), says its type, and a torn or
// altered one never decodes.
func TestTypedBlocks(t *testing.T) {
	values := []uint64{0, 1, math.MaxUint64, 1 << 63, 1<<53 + 1, 1<<53 + 1, 7, math.MaxInt64}
	for _, typ := range []models.FieldType{models.FieldInteger, models.FieldUnsigned, models.FieldString} {
		pts := make([]memPoint, len(values))
		for i, v := range values {
			pts[i] = memPoint{int64(i)*1e9 - 5, v}
		}
		enc := encodeBlock(nil, pts, typ)
		got, gotType, err := decodeBlock(nil, enc)
		require.NoError(t, err)
		require.Equal(t, typ, gotType)
		require.Equal(t, pts, got)
		for k := range enc {
			_, _, err := decodeBlock(nil, enc[:k])
			require.ErrorIs(t, err, ErrBlockCorrupt, "%s prefix %d", typ, k)
		}
	}
	bools := []memPoint{{1, 1}, {2, 1}, {3, 0}, {5, 1}}
	enc := encodeBlock(nil, bools, models.FieldBoolean)
	got, gotType, err := decodeBlock(nil, enc)
	require.NoError(t, err)
	require.Equal(t, models.FieldBoolean, gotType)
	require.Equal(t, bools, got)
	bad := encodeBlock(nil, []memPoint{{1, 2}}, models.FieldInteger)
	bad[5] = byte(models.FieldBoolean) // a boolean of 2
	_, _, err = decodeBlock(nil, sealBlock(bad, 0))
	require.ErrorIs(t, err, ErrBlockCorrupt)
	bad[5] = 9 // no such type
	_, _, err = decodeBlock(nil, sealBlock(bad, 0))
	require.ErrorIs(t, err, ErrBlockCorrupt)
	// A float block is version 1, as releases before types wrote it.
	require.Equal(t, byte(blockVersion), encodeBlock(nil, bools, models.FieldFloat)[4])
}

// TestAdmitTypesConcurrent: writers checking the same new fields at once,
// with different types, agree on one type per field (the first claim) and
// each refuses exactly the points of the other types, whether its check
// found the field known (shared) or claimed it (exclusive).
func TestAdmitTypesConcurrent(t *testing.T) {
	_, s := openShard1(t, manual...)
	const writers, fields = 8, 50
	types := []models.FieldType{models.FieldFloat, models.FieldInteger, models.FieldBoolean, models.FieldString}
	kept := make([][]lineproto.Point, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for f := range fields {
				p := typed("m", "h=a", fmt.Sprintf("f%d", f), int64(w), types[(w+f)%len(types)], 1, "")
				k, _, _ := s.AdmitTypes([]lineproto.Point{p})
				kept[w] = append(kept[w], k...)
			}
		})
	}
	wg.Wait()
	have := s.FieldTypes("m")
	require.Len(t, have, fields)
	admitted := 0
	for w := range writers {
		for _, p := range kept[w] {
			require.Equal(t, have[p.Field], p.Type, "a point of %s admitted with another type than the field's", p.Field)
		}
		admitted += len(kept[w])
	}
	require.Equal(t, writers*fields/len(types), admitted, "every point of the field's type admitted, no other")
}

// TestClaimedTypeOutlivesItsBody: the names a new field's type is saved
// under are the shard's own copies, not the request body's, which is
// reused once its write has ended: the flush after the body changed saves
// the field the point named.
func TestClaimedTypeOutlivesItsBody(t *testing.T) {
	dir := t.TempDir()
	e, s := openShardAt(t, dir, manual...)
	body := []byte("meas fld")
	p := typed("m", "h=a", "f", 1, models.FieldInteger, 7, "")
	p.Metric, p.Field = unsafe.String(&body[0], 4), unsafe.String(&body[5], 3)
	kept, refused, _ := s.AdmitTypes([]lineproto.Point{p})
	require.Zero(t, refused)
	apply(t, s, 1, kept...)
	copy(body, "XXXXXXXX") // the next request's bytes
	flushNow(t, s)
	require.NoError(t, e.Close())
	_, s = openShardAt(t, dir, manual...)
	require.Equal(t, map[string]models.FieldType{"fld": models.FieldInteger}, s.FieldTypes("meas"))
	require.Empty(t, s.FieldTypes("XXXX"))
}
