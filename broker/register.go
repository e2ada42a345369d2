package broker

import (
	"encoding/json"
	"time"

	"github.com/cairn-db/cairn/models"
)

// BrokerRecord builds this broker's record for kv.KeepRegistered.
func BrokerRecord(id, addr string, started time.Time) func() []byte {
	return func() []byte {
		b, _ := json.Marshal(models.BrokerRecord{NodeID: id, Address: addr, StartedAt: started.UnixMilli(), Protocol: models.ProtocolVersion})
		return b
	}
}

// BrokerOwner recognises a broker record: its holder is its address, and it
// is ours when that address is ours.
func BrokerOwner(address string) func([]byte) (string, bool) {
	return func(b []byte) (string, bool) {
		var r models.BrokerRecord
		if err := json.Unmarshal(b, &r); err != nil || r.Address == "" {
			return "an unreadable record", false
		}
		return r.Address, r.Address == address
	}
}
