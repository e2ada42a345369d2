package broker

import (
	"encoding/json"
	"time"

	"github.com/cairn-db/cairn/models"
)

// BrokerRecord builds this broker's record for coordinator.KeepRegistered.
func BrokerRecord(id, addr string, started time.Time) func() []byte {
	return func() []byte {
		b, _ := json.Marshal(models.BrokerRecord{NodeID: id, Address: addr, StartedAt: started.UnixMilli()})
		return b
	}
}
