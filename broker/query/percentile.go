package query

import (
	"math"
	"sort"
)

// percentile() alone without GROUP BY time reports the time of the point
// it selects, as InfluxDB does; the partials the shards keep for it hold
// values without times, so such a statement reads the raw points (within
// the raw-point bound) and the broker selects. The points of a result
// series are sorted by value with sort.Sort, as InfluxDB sorts them, so
// among equal values the same point is selected.

// planRawPercentile turns p into a raw read when it is one percentile over
// a field without GROUP BY time.
func (p *Plan) planRawPercentile() {
	if len(p.Outputs) != 1 || p.Req.Interval > 0 {
		return
	}
	o := p.Outputs[0]
	if o.Func != "percentile" || o.Math != nil || o.Field == "*" || o.Transform != nil {
		return
	}
	p.Req.Raw, p.Req.Stats = true, 0
}

// rawPercentile is the statement's one row from a series' rows [time,
// value] in time order: the selected point, or the range's start and null
// when the rank falls outside the points.
func (p *Plan) rawPercentile(values [][]any) [][]any {
	var pts byValue
	for _, v := range values {
		if f, ok := v[1].(float64); ok {
			pts = append(pts, valuePoint{v[0].(int64), f})
		}
	}
	if len(pts) == 0 {
		return nil
	}
	sort.Sort(pts)
	i := int(math.Floor(float64(len(pts))*p.Outputs[0].N/100+0.5)) - 1
	if i < 0 || i >= len(pts) {
		return nil
	}
	return [][]any{{pts[i].ts, pts[i].v}}
}

type valuePoint struct {
	ts int64
	v  float64
}

type byValue []valuePoint

func (b byValue) Len() int           { return len(b) }
func (b byValue) Less(i, j int) bool { return b[i].v < b[j].v }
func (b byValue) Swap(i, j int)      { b[i], b[j] = b[j], b[i] }
