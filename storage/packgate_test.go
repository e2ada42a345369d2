package storage

import (
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/statemachine"
	"github.com/stretchr/testify/require"
)

// TestAllSpeakPacks: packs are allowed only when every replica has a live
// record of protocol 4 or later; a replica of an older release (or of
// 0.1.0, without a protocol), or one without a record, keeps them off.
func TestAllSpeakPacks(t *testing.T) {
	nodes := statemachine.MapOf(map[string]models.StorageNode{
		"new1": {NodeID: "new1", Protocol: models.ProtocolPacks},
		"new2": {NodeID: "new2", Protocol: models.ProtocolPacks + 1},
		"old":  {NodeID: "old", Protocol: models.ProtocolPacks - 1},
		"v010": {NodeID: "v010"},
	})
	for _, c := range []struct {
		ids  []string
		want bool
	}{
		{[]string{"new1"}, true},
		{[]string{"new1", "new2"}, true},
		{[]string{"new1", "old"}, false},
		{[]string{"v010", "new1"}, false},
		{[]string{"new1", "down"}, false},
		{nil, false},
	} {
		require.Equal(t, c.want, allSpeak(nodes, c.ids, models.ProtocolPacks), "%v", c.ids)
	}
}
