package broker

import (
	"time"

	"github.com/cairn-db/cairn/models"
)

// retainedFrom is the oldest time, in unix ns, a read of db answers at now:
// with a retention, points older than it stop being answered at once
// (before the shards reclaim their space); without one, every time.
func retainedFrom(db models.Database, now time.Time) (int64, bool) {
	r := db.Retention.D()
	if r <= 0 {
		return 0, false
	}
	return now.Add(-r).UnixNano(), true
}

// clock is d.Now, or the wall clock.
func (d *Data) clock() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}
