package wire

import (
	"errors"
	"math"
	"testing"

	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

func TestDeleteEntryRoundTrip(t *testing.T) {
	for _, d := range []*Delete{
		{Metric: "cpu", Min: math.MinInt64, Max: math.MaxInt64},
		{Metric: "cpu", Tags: []lineproto.Tag{{Key: "dc", Value: "x"}, {Key: "host", Value: "a"}}, Min: -5, Max: 1_700_000_000_000_000_000},
	} {
		b, err := Entry{TxnID: 7, Term: 3, Delete: d}.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, byte(entryV3), b[0], "a delete is an entry version of its own")
		var got Entry
		require.NoError(t, got.UnmarshalBinary(b))
		require.Equal(t, Entry{TxnID: 7, Term: 3, Delete: d}, got)
	}
}

// A reader of versions 1 and 2 only (the release before deletes) checks
// the first byte before anything else: a delete reaches it as an unknown
// version, never as points.
func TestDeleteEntryIsRefusedByVersionCheck(t *testing.T) {
	b, err := Entry{TxnID: 1, Term: 1, Delete: &Delete{Metric: "cpu", Max: 10}}.MarshalBinary()
	require.NoError(t, err)
	require.NotEqual(t, byte(entryV1), b[0])
	require.NotEqual(t, byte(entryV2), b[0])
	b[0] = 4
	var e Entry
	err = e.UnmarshalBinary(b)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "unknown entry version 4")
}

func TestDeleteEntryRefusesBadInput(t *testing.T) {
	for name, d := range map[string]*Delete{
		"no measurement": {Max: 1},
		"empty range":    {Metric: "cpu", Min: 5, Max: 4},
		"unsorted tags":  {Metric: "cpu", Tags: []lineproto.Tag{{Key: "z", Value: "1"}, {Key: "a", Value: "2"}}},
		"repeated tag":   {Metric: "cpu", Tags: []lineproto.Tag{{Key: "a", Value: "1"}, {Key: "a", Value: "2"}}},
	} {
		_, err := Entry{TxnID: 1, Delete: d}.MarshalBinary()
		require.ErrorIs(t, err, ErrBadDelete, name)
		// The same bytes from a peer are refused as corrupt.
		var e Entry
		require.ErrorIs(t, e.UnmarshalBinary(AppendDeleteEntry(nil, 1, 1, d)), ErrCorrupt, name)
	}
	_, err := Entry{TxnID: 1, Points: []lineproto.Point{{Metric: "cpu", Field: "v"}}, Delete: &Delete{Metric: "cpu"}}.MarshalBinary()
	require.ErrorIs(t, err, ErrBadDelete)

	good := AppendDeleteEntry(nil, 1, 1, &Delete{Metric: "cpu", Tags: []lineproto.Tag{{Key: "host", Value: "a"}}, Max: 9})
	for i := 1; i < len(good); i++ {
		var e Entry
		err := e.UnmarshalBinary(good[:i])
		require.True(t, errors.Is(err, ErrCorrupt), "truncated at %d: %v", i, err)
	}
	var e Entry
	require.ErrorIs(t, e.UnmarshalBinary(append(good, 0)), ErrCorrupt, "trailing bytes")
}
