package storage

import (
	"context"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/client"
	"github.com/cairn-db/cairn/storage/engine"
	"github.com/stretchr/testify/require"
)

// TestBatchedTxnAnswerSkipsBusyLog: a replica whose log is held (a snapshot
// restore holds it for as long as the snapshot streams) is left out of the
// batched answer, as a silent one, instead of holding up the answers of
// the node's other replicas; once free it answers again.
func TestBatchedTxnAnswerSkipsBusyLog(t *testing.T) {
	eng, err := engine.NewBoltEngine(t.TempDir())
	require.NoError(t, err)
	defer eng.Close()
	h := NewHost(HostConfig{NodeID: "n", Engine: eng})
	for shard := range 2 {
		s, err := eng.Open("d", shard)
		require.NoError(t, err)
		wait, err := s.Append(engine.Entry{TxnID: 1, Term: 2})
		require.NoError(t, err)
		require.NoError(t, wait())
		r := &replica{h: h, db: "d", shard: shard, id: models.ShardID("d", shard), eng: s}
		r.want.term = 2
		h.replicas[r.id] = r
	}
	want := models.ReplicaTxn{LastTxnID: 1, LastTerm: 2, Term: 2, SeenTerm: 2}
	busy := h.replicas["d/1"]
	busy.applyMu.Lock()
	got := h.answerTxns(context.Background(), client.TxnsRequest{DBs: map[string][]int{"d": {0, 1}}})
	require.Equal(t, map[string]map[string]models.ReplicaTxn{"d": {"0": want}}, got.DBs, "the busy replica is left out")
	busy.applyMu.Unlock()
	got = h.answerTxns(context.Background(), client.TxnsRequest{DBs: map[string][]int{"d": {0, 1}}})
	require.Equal(t, map[string]map[string]models.ReplicaTxn{"d": {"0": want, "1": want}}, got.DBs)
}
