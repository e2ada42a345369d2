package models

// RollupCell is one series' points of one rollup interval, as a shard keeps
// it: what the aggregates a rollup answers need. Start is the interval's
// start; Type is the series' field type (float, integer or unsigned: the
// values are their float64 forms, as SeriesPoint.Value).
type RollupCell struct {
	Start           int64
	Type            FieldType
	Count           int64
	Sum             float64
	Min, Max        float64
	MinTS, MaxTS    int64
	First, Last     float64
	FirstTS, LastTS int64
}

// Add folds one point in, with the ties of InfluxQL's selectors as the
// query's running aggregates break them: the earlier point for min and max,
// the larger value for first and last at the same time.
func (c *RollupCell) Add(ts int64, v float64) {
	c.Merge(RollupCell{Start: c.Start, Type: c.Type, Count: 1, Sum: v, Min: v, Max: v, MinTS: ts, MaxTS: ts,
		First: v, Last: v, FirstTS: ts, LastTS: ts})
}

// Merge folds o (of the same series) into c.
func (c *RollupCell) Merge(o RollupCell) {
	if o.Count == 0 {
		return
	}
	if c.Count == 0 {
		start := c.Start
		*c = o
		c.Start = start
		return
	}
	c.Count += o.Count
	c.Sum += o.Sum
	if o.Min < c.Min || o.Min == c.Min && o.MinTS < c.MinTS {
		c.Min, c.MinTS = o.Min, o.MinTS
	}
	if o.Max > c.Max || o.Max == c.Max && o.MaxTS < c.MaxTS {
		c.Max, c.MaxTS = o.Max, o.MaxTS
	}
	if o.FirstTS < c.FirstTS || o.FirstTS == c.FirstTS && o.First > c.First {
		c.First, c.FirstTS = o.First, o.FirstTS
	}
	if o.LastTS > c.LastTS || o.LastTS == c.LastTS && o.Last > c.Last {
		c.Last, c.LastTS = o.Last, o.LastTS
	}
}
