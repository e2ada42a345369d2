package meta

import (
	"slices"
	"time"

	"github.com/cairn-db/cairn/models"
)

// checkLifecycle validates d's retention, accepted time window, partition
// length, policy name and rollup levels, and fills the window's default ahead.
func checkLifecycle(d *models.Database) error {
	for _, f := range []struct {
		name string
		v    models.Duration
	}{{"retention", d.Retention}, {"ahead", d.Ahead}, {"behead", d.Behead}, {"partition", d.Partition}} {
		if f.v < 0 || f.v.D()%time.Second != 0 {
			return bad("invalid %s %q: want 0 or a positive whole number of seconds", f.name, f.v)
		}
	}
	if d.Partition > 0 && d.Retention > 0 && d.Partition > d.Retention {
		return bad("invalid partition %s: longer than the retention %s", d.Partition, d.Retention)
	}
	if d.Policy != "" && !models.ValidName(d.Policy) {
		return bad("invalid retention policy name %q: want [A-Za-z0-9_-]{1,64}", d.Policy)
	}
	if err := models.CheckRollups(d.Rollups, d.Retention); err != nil {
		return bad("invalid rollups: %s", err)
	}
	if d.Ahead == 0 {
		d.Ahead = models.Duration(models.DefaultAhead)
	}
	return nil
}

// sameLifecycle reports whether a and b keep and accept data alike.
func sameLifecycle(a, b models.Database) bool {
	return a.Retention == b.Retention && a.Ahead == b.Ahead && a.Behead == b.Behead &&
		a.Partition == b.Partition && a.PolicyName() == b.PolicyName() && slices.EqualFunc(a.Rollups, b.Rollups, sameRollup)
}

func sameRollup(a, b models.Rollup) bool {
	return a.Interval == b.Interval && a.Retention == b.Retention && slices.Equal(a.Functions, b.Functions)
}
