package query

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/influxdata/influxql"
)

// A SELECT over several measurements (FROM cpu, mem or FROM /regex/) runs
// once per measurement, each as a statement of its own (Plan.For); the
// answers are put together as InfluxDB does (Plan.Combine): series in
// measurement order (SLIMIT and SOFFSET count per measurement), with * (raw
// or in a function) every series gets the union of the columns, and with
// GROUP BY * the union of the tag keys.

// MaxSources bounds the measurements one SELECT reads.
const MaxSources = 1000

// planSources reads FROM into p.
func (p *Plan) planSources(sources influxql.Sources, now time.Time) error {
	if sub, ok := sources[0].(*influxql.SubQuery); ok && len(sources) == 1 {
		return p.planSubquery(sub, now)
	}
	for _, src := range sources {
		m, ok := src.(*influxql.Measurement)
		if !ok {
			return unsupported("a subquery beside other sources")
		}
		if m.Database != p.DB && len(p.sources) > 0 {
			return unsupported("measurements of several databases in one FROM")
		}
		p.DB = m.Database
		p.sources = append(p.sources, m)
	}
	if len(p.sources) == 1 && p.sources[0].Regex == nil {
		p.Req.Measurement = p.sources[0].Name
		p.sources = nil
	}
	return nil
}

// NeedsMeasurements says whether Measurements needs the names of the
// database's measurements (FROM holds a regex).
func (p *Plan) NeedsMeasurements() bool {
	for _, m := range p.sources {
		if m.Regex != nil {
			return true
		}
	}
	return false
}

// Measurements lists the measurements the statement reads, sorted, given
// the database's (only read when NeedsMeasurements).
func (p *Plan) Measurements(existing []string) ([]string, error) {
	if p.sources == nil {
		return []string{p.Req.Measurement}, nil
	}
	set := map[string]bool{}
	for _, m := range p.sources {
		if m.Regex == nil {
			set[m.Name] = true
			continue
		}
		for _, name := range existing {
			if m.Regex.Val.MatchString(name) {
				set[name] = true
			}
		}
	}
	if len(set) > MaxSources {
		return nil, fmt.Errorf("%w: FROM names %d measurements (at most %d)", ErrTooLarge, len(set), MaxSources)
	}
	return slices.Sorted(maps.Keys(set)), nil
}

// For is the statement over one of its measurements; Combine puts the
// answers together.
func (p *Plan) For(measurement string) *Plan {
	q := *p
	q.Req.Measurement = measurement
	if q.Local != nil {
		local := *q.Local
		local.Measurement = measurement
		q.Local = &local
	}
	q.sources = nil
	return &q
}

// Combine puts the answers of For(m) for each of Measurements together.
func (p *Plan) Combine(per [][]Row) []Row {
	if p.sources == nil && len(per) == 1 {
		return per[0]
	}
	if p.Desc { // Merge reversed each measurement's series; reverse them all
		slices.Reverse(per)
	}
	var rows []Row
	for _, r := range per {
		rows = append(rows, r...)
	}
	switch {
	case p.Wildcard:
		unionColumns(rows, nil)
	case p.wildcardFuncs():
		unionColumns(rows, p.wildcardColumns(rows))
	}
	if p.Req.GroupAll {
		unionTags(rows)
	}
	return rows
}

// unionTags gives every row of a GROUP BY * the tag keys of all, with ""
// where a row has none (InfluxDB groups by the sources' tag keys).
func unionTags(rows []Row) {
	keys := map[string]bool{}
	for _, r := range rows {
		for k := range r.Tags {
			keys[k] = true
		}
	}
	for _, r := range rows {
		for k := range keys {
			if _, ok := r.Tags[k]; !ok {
				r.Tags[k] = ""
			}
		}
	}
}

// unionColumns gives every row the columns given, or else those of all,
// sorted after time, with nulls where a row had none.
func unionColumns(rows []Row, columns []string) {
	if columns == nil {
		set := map[string]bool{}
		for _, r := range rows {
			for _, c := range r.Columns[1:] {
				set[c] = true
			}
		}
		columns = append([]string{"time"}, slices.Sorted(maps.Keys(set))...)
	}
	for i := range rows {
		r := &rows[i]
		if slices.Equal(r.Columns, columns) {
			continue
		}
		at := make(map[string]int, len(r.Columns))
		for k, c := range r.Columns {
			at[c] = k
		}
		if r.Values != nil {
			for j, v := range r.Values {
				nv := make([]any, len(columns))
				nv[0] = v[0]
				for k, c := range columns[1:] {
					if from, ok := at[c]; ok {
						nv[k+1] = v[from]
					}
				}
				r.Values[j] = nv
			}
		} else {
			cells := make([][]Cell, len(columns)-1)
			for k, c := range columns[1:] {
				if from, ok := at[c]; ok {
					cells[k] = r.Cells[from-1]
				} else {
					cells[k] = make([]Cell, len(r.Times))
				}
			}
			r.Cells = cells
		}
		r.Columns = columns
	}
}
