package broker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cairn-db/cairn/broker"
	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/stretchr/testify/require"
)

// TestAcceptedWindow: a write keeps the points inside its database's
// accepted window and drops the others line by line with a partial write
// naming the series, the time and the window: one past ahead (1 day by
// default), and in a database with a retention one older than it, such as
// a timestamp in milliseconds read as nanoseconds (1970).
func TestAcceptedWindow(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	dbs := map[string]models.Database{
		"plain": {Name: "plain", StorageCluster: "default", NumShards: 1, ReplicaFactor: 1},
		"kept":  {Name: "kept", StorageCluster: "default", NumShards: 1, ReplicaFactor: 1, Retention: models.Duration(2 * time.Hour), Ahead: models.Duration(time.Minute)},
	}
	st := &statemachine.State{
		Databases: statemachine.MapOf(dbs),
		ShardStates: statemachine.MapOf(map[string]models.ShardStates{
			"plain": {DB: "plain", Shards: []models.ShardState{{ID: 0, Leader: "self", Term: 1, Status: models.StatusOnline}}},
			"kept":  {DB: "kept", Shards: []models.ShardState{{ID: 0, Leader: "self", Term: 1, Status: models.StatusOnline}}},
		}),
		Nodes: statemachine.NestedMapOf(map[string]map[string]models.StorageNode{"default": {"self": {NodeID: "self", NodeAddress: "127.0.0.1:1"}}}),
	}
	var mu sync.Mutex
	stored := map[string][]int64{}
	d := &broker.Data{State: func() *statemachine.State { return st }, Changed: func() <-chan struct{} { return make(chan struct{}) },
		Client: http.DefaultClient, WriteTimeout: 5 * time.Second, Self: "self", Now: func() time.Time { return now },
		Local: localShards{write: func(_ context.Context, db string, _ int, _ int64, points []lineproto.Point) error {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range points {
				stored[db] = append(stored[db], p.TS)
			}
			return nil
		}}}
	ns := now.UnixNano()
	body := fmt.Sprintf("cpu,host=a v=1 %d\ncpu,host=a v=2 %d\ncpu,host=b v=3 %d\n", ns, ns/1e6, ns+int64(25*time.Hour))
	err := d.Write(context.Background(), "plain", "ns", []byte(body))
	var partial *models.PartialWriteError
	require.True(t, errors.As(err, &partial), "%v", err)
	require.Equal(t, 1, partial.Dropped, "no behead: 1970 is kept, a day and an hour ahead is not")
	require.Contains(t, err.Error(), `point cpu,host=b at 2026-11-27T10:00:00Z is outside the accepted time window of database "plain": `+
		`any time to 2026-11-27T09:00:00Z (no behead, ahead 1d)`)
	require.Equal(t, []int64{ns, ns / 1e6}, stored["plain"])

	body = fmt.Sprintf("cpu v=1 %d\ncpu v=2 %d\ncpu v=3 %d\n", ns/1e6, ns-int64(time.Hour), ns+int64(2*time.Minute))
	err = d.Write(context.Background(), "kept", "ns", []byte(body))
	require.True(t, errors.As(err, &partial), "%v", err)
	require.Equal(t, 2, partial.Dropped)
	require.Contains(t, err.Error(), `point cpu at 1970-01-01T00:29:55.6836Z is outside the accepted time window of database "kept": `+
		`2026-11-26T07:00:00Z to 2026-11-26T09:01:00Z (retention 2h, ahead 1m)`, "milliseconds sent as nanoseconds")
	require.Equal(t, []int64{ns - int64(time.Hour)}, stored["kept"])
}
