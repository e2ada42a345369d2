package storage

import (
	"context"
	"testing"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestEvaluateStopsWithItsContext: a shard stops evaluating a select once
// the broker's context ends (its query timed out or its client left),
// instead of reading every series to the end.
func TestEvaluateStopsWithItsContext(t *testing.T) {
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = eng.Close() })
	s, err := eng.Open("d", 0)
	require.NoError(t, err)
	pts := make([]lineproto.Point, 10)
	for i := range pts {
		pts[i] = lineproto.Point{Metric: "cpu", Tags: []lineproto.Tag{{Key: "host", Value: "a"}}, Field: "value", Value: float64(i), TS: int64(i)}
	}
	require.NoError(t, s.Apply(engine.Entry{TxnID: 1, Term: 1, Points: pts}))
	req := &query.ShardRequest{Measurement: "cpu", Fields: []string{"value"}, Raw: true, Start: 0, End: 100}
	res, err := evaluate(context.Background(), s, req)
	require.NoError(t, err)
	require.Len(t, res.Raw, 1)
	require.Len(t, res.Raw[0].TS, 10)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = evaluate(ctx, s, req)
	require.ErrorIs(t, err, context.Canceled)
}
