package query

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/cairn-db/cairn/models"
	"github.com/influxdata/influxql"
)

// Merge combines the shards' answers into the statement's result series.
func (p *Plan) Merge(results []*ShardResult) ([]Row, error) {
	if p.Local != nil {
		return p.mergeLocal(results)
	}
	var rows []Row
	var err error
	if p.Req.Raw {
		rows, err = p.mergeRaw(results)
	} else {
		rows, err = p.mergeAggregates(results)
	}
	if err != nil {
		return nil, err
	}
	if p.Desc { // InfluxDB walks the series in descending order too
		slices.Reverse(rows)
	}
	if p.SOffset > 0 {
		rows = rows[min(p.SOffset, len(rows)):]
	}
	if p.SLimit > 0 && len(rows) > p.SLimit {
		rows = rows[:p.SLimit]
	}
	return rows, nil
}

type mergedGroup struct {
	tags   []Tag
	fields map[string]FieldBuckets
}

// MaxResultValues bounds the values (rows x columns, over all series) an
// aggregate statement may lay out: GROUP BY time over many groups multiplies.
const MaxResultValues = 20_000_000

func (p *Plan) mergeAggregates(results []*ShardResult) ([]Row, error) {
	groups := map[string]*mergedGroup{}
	for _, r := range results {
		for _, g := range r.Groups {
			key := GroupKey(g.Tags)
			mg := groups[key]
			if mg == nil {
				mg = &mergedGroup{tags: g.Tags, fields: map[string]FieldBuckets{}}
				groups[key] = mg
			}
			for _, f := range g.Fields {
				merged, err := MergeFieldBuckets(mg.fields[f.Field], f)
				if err != nil {
					return nil, err
				}
				mg.fields[f.Field] = merged
			}
		}
	}
	if p.wildcardFuncs() {
		fields := map[string]bool{}
		types := map[string]models.FieldType{}
		for _, g := range groups {
			for f, fb := range g.fields {
				fields[f], types[f] = true, fb.Type
			}
		}
		p = p.expandFields(fields, types)
	}
	for _, mg := range groups {
		for _, o := range p.Outputs {
			if err := unsupportedFor(o.Func, mg.fields[o.Field].Type); err != nil {
				return nil, err
			}
		}
	}
	buckets := int64(1)
	if p.Req.Interval > 0 {
		buckets = (BucketOf(p.Req.End, p.Req.Start, p.Req.Interval, p.Req.Offset)-BucketOf(p.Req.Start, p.Req.Start, p.Req.Interval, p.Req.Offset))/p.Req.Interval + 1
	}
	if n := int64(len(groups)) * buckets * int64(len(p.Outputs)+1); n > MaxResultValues {
		return nil, fmt.Errorf("%w: %d series x %d time buckets is more than %d values; narrow the time range, use a larger GROUP BY time or fewer groups",
			ErrTooLarge, len(groups), buckets, MaxResultValues)
	}
	columns := p.columns()
	keys := slices.Sorted(maps.Keys(groups))
	rows := make([]Row, len(keys))
	layout := func(lo, hi int) {
		for k := lo; k < hi; k++ {
			rows[k] = p.groupRow(groups[keys[k]], columns)
		}
	}
	// Groups lay out independently: a large answer (thousands of groups
	// by hundreds of buckets) is split over the CPUs.
	if workers := min(runtime.GOMAXPROCS(0), len(keys)); workers > 1 && int64(len(keys))*buckets >= parallelCells {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				layout(w*len(keys)/workers, (w+1)*len(keys)/workers)
			}()
		}
		wg.Wait()
	} else {
		layout(0, len(keys))
	}
	out := rows[:0]
	for _, row := range rows {
		if len(row.Times) > 0 {
			out = append(out, row)
		}
	}
	return out, nil
}

// parallelCells is the number of (group, bucket) cells past which groups
// are laid out by several goroutines.
const parallelCells = 100_000

// groupRow lays out one group's row: its tags, its buckets in time order,
// filled, ordered and paged.
func (p *Plan) groupRow(g *mergedGroup, columns []string) Row {
	row := Row{Name: p.Req.Measurement, Columns: columns}
	if p.Grouped {
		row.Tags = make(map[string]string, len(g.tags))
		for _, t := range g.tags {
			row.Tags[t.Key] = t.Value
		}
	}
	row.Times, row.Cells = p.bucketRows(g)
	for i, o := range p.Outputs {
		if o.Math != nil {
			for k, c := range row.Cells[i] {
				row.Cells[i][k] = evalMath(o.Math, c)
			}
		}
	}
	if tr := p.Outputs[0].Transform; tr != nil {
		from := p.From
		if p.extra == 0 {
			from = math.MinInt64
		}
		var col []Cell
		row.Times, col = tr.apply(row.Times, row.Cells[0], from)
		row.Cells = [][]Cell{col}
	}
	if p.Desc {
		slices.Reverse(row.Times)
		for _, col := range row.Cells {
			slices.Reverse(col)
		}
	}
	lo, hi := p.pageRange(len(row.Times))
	row.Times = row.Times[lo:hi]
	for i := range row.Cells {
		row.Cells[i] = row.Cells[i][lo:hi]
	}
	return row
}

// pageRange is the part [lo, hi) of n rows that OFFSET and LIMIT keep.
func (p *Plan) pageRange(n int) (int, int) {
	lo, hi := min(p.Offset, n), n
	if p.Limit > 0 && hi-lo > p.Limit {
		hi = lo + p.Limit
	}
	return lo, hi
}

func (p *Plan) columns() []string {
	cols := []string{"time"}
	for _, o := range p.Outputs {
		cols = append(cols, o.Name)
	}
	return cols
}

func (p *Plan) page(values [][]any) [][]any {
	if p.Offset > 0 {
		values = values[min(p.Offset, len(values)):]
	}
	if p.Limit > 0 && len(values) > p.Limit {
		values = values[:p.Limit]
	}
	return values
}

// bucketRows lays one group's buckets out in time, one column of cells per
// output, and fills the gaps.
func (p *Plan) bucketRows(g *mergedGroup) ([]int64, [][]Cell) {
	req := &p.Req
	lists := make([]FieldBuckets, len(p.Outputs))
	for i, o := range p.Outputs {
		lists[i] = g.fields[o.Field]
	}
	at := func(i int, t int64) *Partial { return lists[i].At(t) }
	cols := make([][]Cell, len(p.Outputs))
	if req.Interval <= 0 {
		t := req.Start
		if t == math.MinInt64 {
			t = 0
		}
		times := []int64{t}
		for i, o := range p.Outputs {
			pt := at(i, req.Start)
			cols[i] = []Cell{finalize(pt, o, lists[i].Type)}
			if len(p.Outputs) == 1 && selectors[o.Func] && pt != nil && pt.X != nil {
				times[0] = selectorTime(pt, o.Func)
			}
		}
		return times, cols
	}
	first := BucketOf(req.Start, req.Start, req.Interval, req.Offset)
	last := BucketOf(req.End, req.Start, req.Interval, req.Offset)
	n := int((last-first)/req.Interval + 1)
	times := make([]int64, n)
	for r := range times {
		times[r] = first + int64(r)*req.Interval
	}
	cells := make([]Cell, n*len(p.Outputs)) // one allocation for every column
	for i, o := range p.Outputs {
		col := cells[i*n : (i+1)*n : (i+1)*n]
		cols[i] = col
		l := lists[i]
		if l.Step != req.Interval || (l.First-first)%req.Interval != 0 {
			for r, t := range times { // not on the rows' grid: look up by time
				col[r] = finalize(l.At(t), o, l.Type)
			}
			continue
		}
		// Row r is slot r-off of the buckets (a shard's are on the grid).
		off := (l.First - first) / req.Interval
		lo, hi := max(0, off), min(int64(n), off+int64(len(l.Parts)))
		if lo >= hi {
			continue // no bucket among the rows
		}
		parts := l.Parts[lo-off:]
		for r := lo; r < hi; r++ {
			pt := &parts[r-lo]
			if pt.Count == 0 {
				continue
			}
			switch o.Func { // the common ones without finalize's switch
			case "mean":
				col[r] = floatCell(pt.Sum / float64(pt.Count))
			case "count":
				col[r] = Cell{Kind: CellInt, I: pt.Count}
			default:
				col[r] = finalize(pt, o, l.Type)
			}
		}
	}
	if p.Fill == influxql.NoFill { // drop the rows where every column is null
		k := 0
		for r := range times {
			empty := true
			for _, col := range cols {
				empty = empty && col[r].Kind == CellNull
			}
			if empty {
				continue
			}
			times[k] = times[r]
			for _, col := range cols {
				col[k] = col[r]
			}
			k++
		}
		times = times[:k]
		for i := range cols {
			cols[i] = cols[i][:k]
		}
	}
	switch p.Fill {
	case influxql.NumberFill:
		fill, _ := p.FillValue.(float64)
		for _, col := range cols {
			for k := range col {
				if col[k].Kind == CellNull {
					col[k] = floatCell(fill)
				}
			}
		}
	case influxql.PreviousFill:
		for _, col := range cols {
			prev := Cell{}
			for k := range col {
				if col[k].Kind == CellNull {
					col[k] = prev
				} else {
					prev = col[k]
				}
			}
		}
	case influxql.LinearFill:
		for _, col := range cols {
			linearFill(times, col)
		}
	case influxql.NullFill, influxql.NoFill:
		// InfluxDB's count() reports 0, not null, for an empty interval
		// (fill replaces that 0, which the cases above did).
		for i, o := range p.Outputs {
			if o.Func != "count" && o.Func != "count_distinct" {
				continue
			}
			for k := range cols[i] {
				if cols[i][k].Kind == CellNull {
					cols[i][k] = Cell{Kind: CellInt}
				}
			}
		}
	}
	return times, cols
}

// linearFill interpolates a column between its known neighbours, by time;
// leading and trailing gaps stay null. It computes as InfluxDB does, in
// the same order (slope, then slope*x + y0), so the floats are the same
// bits; between integers it truncates, as InfluxDB does.
func linearFill(times []int64, col []Cell) {
	prev := -1
	for j, c := range col {
		if c.Kind == CellNull {
			continue
		}
		if prev >= 0 && j-prev > 1 {
			for k := prev + 1; k < j; k++ {
				x := float64(times[k] - times[prev])
				if c.Kind == CellInt {
					m := float64(c.I-col[prev].I) / float64(times[j]-times[prev])
					col[k] = Cell{Kind: CellInt, I: int64(m*x + float64(col[prev].I))}
				} else {
					m := (c.float() - col[prev].float()) / float64(times[j]-times[prev])
					col[k] = floatCell(m*x + col[prev].float())
				}
			}
		}
		prev = j
	}
}

func selectorTime(p *Partial, fn string) int64 {
	switch fn {
	case "min":
		return p.X.MinTS
	case "max":
		return p.X.MaxTS
	case "first":
		return p.X.FirstTS
	}
	return p.X.LastTS
}

// finalize turns a merged partial of a field of type t into the value of
// one aggregate, in InfluxDB's type (typedCell); null for an empty bucket.
func finalize(p *Partial, o Output, t models.FieldType) Cell {
	c := finalizeFloat(p, o)
	if c.Kind != CellFloat || t == models.FieldFloat {
		return c
	}
	return typedCell(c.F, p.X, o.Func, t)
}

// typedCell is the value f of aggregate fn over a field of type t as
// InfluxDB answers it: what picks or adds integers stays an integer
// (sum, min, max, first, last, spread, percentile; mean, median and
// stddev are floats), a boolean picked is a boolean, a string picked (first,
// last) its string. Integers past 2^53 went through a float on the way.
func typedCell(f float64, x *Extra, fn string, t models.FieldType) Cell {
	switch fn {
	case "mean", "median", "stddev":
		return floatCell(f)
	}
	switch t {
	case models.FieldInteger:
		return Cell{Kind: CellInt, I: int64(f)}
	case models.FieldUnsigned:
		return Cell{Kind: CellUint, I: int64(uint64(f))}
	case models.FieldBoolean:
		c := Cell{Kind: CellBool}
		if f != 0 {
			c.I = 1
		}
		return c
	case models.FieldString:
		switch {
		case x == nil:
			return Cell{}
		case fn == "first":
			return Cell{Kind: CellString, S: x.FirstS}
		case fn == "last":
			return Cell{Kind: CellString, S: x.LastS}
		}
	}
	return floatCell(f)
}

// unsupportedFor is InfluxDB's refusal of an aggregate over a field type
// it does not take: strings only count and pick first or last, booleans
// also min and max.
func unsupportedFor(fn string, t models.FieldType) error {
	var it string
	switch {
	case t == models.FieldString && fn != "count" && fn != "first" && fn != "last":
		it = "string"
	case t == models.FieldBoolean && fn != "count" && fn != "first" && fn != "last" && fn != "min" && fn != "max":
		it = "boolean"
	default:
		return nil
	}
	return models.Mark(fmt.Errorf("unsupported %s iterator type: *query.%sInterruptIterator", fn, it), ErrBadQuery)
}

// finalizeFloat is finalize's value as a float (or count's integer).
func finalizeFloat(p *Partial, o Output) Cell {
	if p == nil || p.Count == 0 {
		return Cell{}
	}
	switch o.Func {
	case "count":
		return Cell{Kind: CellInt, I: p.Count}
	case "sum":
		return floatCell(p.Sum)
	case "mean":
		return floatCell(p.Sum / float64(p.Count))
	}
	x := p.X
	if x == nil {
		return Cell{} // a shard that did not keep what was asked: nothing to say
	}
	switch o.Func {
	case "min":
		return floatCell(x.Min)
	case "max":
		return floatCell(x.Max)
	case "spread":
		return floatCell(x.Max - x.Min)
	case "first":
		return floatCell(x.First)
	case "last":
		return floatCell(x.Last)
	case "stddev":
		if p.Count < 2 {
			return Cell{}
		}
		return floatCell(math.Sqrt(x.M2 / float64(p.Count-1)))
	case "count_distinct":
		return Cell{Kind: CellInt, I: countDistinct(x.Values)}
	case "median":
		v := slices.Clone(x.Values)
		slices.Sort(v)
		n := len(v)
		if n == 0 {
			return Cell{}
		}
		if n%2 == 1 {
			return floatCell(v[n/2])
		}
		return floatCell((v[n/2-1] + v[n/2]) / 2)
	case "percentile":
		v := slices.Clone(x.Values)
		slices.Sort(v)
		// InfluxDB's nearest-rank: the value at rank round(n*N/100).
		i := int(math.Floor(float64(len(v))*o.N/100+0.5)) - 1
		if i < 0 || i >= len(v) {
			return Cell{}
		}
		return floatCell(v[i])
	}
	return Cell{}
}
