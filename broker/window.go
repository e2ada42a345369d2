package broker

import (
	"fmt"
	"math"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
)

// acceptWindow is the write path's check of every line's timestamp against
// db's accepted window at now (models.Database.Window): a point outside is
// dropped with a message naming its series, its time and the window, so a
// client that sends milliseconds as nanoseconds (1970) to a database with
// a retention or behead hears why.
func acceptWindow(db models.Database, now time.Time) func(p *lineproto.Point) error {
	lo, hi := db.Window(now)
	return func(p *lineproto.Point) error {
		if p.TS >= lo && p.TS <= hi {
			return nil
		}
		key := lineproto.AppendSeriesKey(nil, p.Metric, p.Tags, "")
		from := "any time"
		if lo > math.MinInt64 {
			from = stamp(lo)
		}
		return fmt.Errorf("point %s at %s is outside the accepted time window of database %q: %s to %s (%s)",
			key[:len(key)-1], stamp(p.TS), db.Name, from, stamp(hi), db.WindowRule())
	}
}

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }
