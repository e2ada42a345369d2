package query

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// rawRow is one (series, time) of a raw query.
type rawRow struct {
	ts     int64
	series string
	tags   []Tag
	fields map[string]any
}

func (p *Plan) mergeRaw(results []*ShardResult) ([]Row, error) {
	return p.mergeRawAs(results, nil)
}

// mergeRawAs is mergeRaw with the columns fixed when fixed is not nil (a
// streamed answer's pages share the columns of its first), else the
// outputs found in the answer.
func (p *Plan) mergeRawAs(results []*ShardResult, fixed []Output) ([]Row, error) {
	type group struct {
		tags []Tag
		rows map[string]*rawRow // series key + ts
	}
	groups := map[string]*group{}
	fieldsSeen := map[string]bool{}
	tagsSeen := map[string]bool{}
	total := 0
	for _, r := range results {
		for _, s := range r.Raw {
			if total += len(s.TS); total > DefaultMaxPoints {
				return nil, fmt.Errorf("%w: more than %d points; narrow the time range, the series or add LIMIT", ErrTooLarge, DefaultMaxPoints)
			}
			fieldsSeen[s.Field] = true
			var gtags []Tag
			tagMap := map[string]string{}
			for _, t := range s.Tags {
				tagMap[t.Key] = t.Value
			}
			switch {
			case p.Req.GroupAll:
				gtags = s.Tags
			default:
				for _, k := range p.Req.GroupBy {
					gtags = append(gtags, Tag{k, tagMap[k]})
				}
			}
			for _, t := range s.Tags {
				if !p.Req.GroupAll && !slices.Contains(p.Req.GroupBy, t.Key) {
					tagsSeen[t.Key] = true
				}
			}
			gk := GroupKey(gtags)
			g := groups[gk]
			if g == nil {
				g = &group{tags: gtags, rows: map[string]*rawRow{}}
				groups[gk] = g
			}
			sk := GroupKey(s.Tags)
			for i, ts := range s.TS {
				rk := fmt.Sprintf("%s\x01%d", sk, ts)
				row := g.rows[rk]
				if row == nil {
					row = &rawRow{ts: ts, series: sk, tags: s.Tags, fields: map[string]any{}}
					g.rows[rk] = row
				}
				row.fields[s.Field] = s.Point(i).Any()
			}
		}
	}
	outputs := p.Outputs
	switch {
	case fixed != nil:
		outputs = fixed
	case p.Wildcard:
		outputs = nil
		names := map[string]bool{}
		for f := range fieldsSeen {
			names[f] = true
		}
		for t := range tagsSeen {
			names[t] = true
		}
		for _, n := range slices.Sorted(maps.Keys(names)) {
			outputs = append(outputs, Output{Name: n, Field: n, Tag: !fieldsSeen[n]})
		}
	default:
		outputs = slices.Clone(outputs)
		for i := range outputs {
			outputs[i].Tag = outputs[i].Tag || !fieldsSeen[outputs[i].Field]
		}
	}
	columns := []string{"time"}
	for _, o := range outputs {
		columns = append(columns, o.Name)
	}
	var out []Row
	for _, gk := range slices.Sorted(maps.Keys(groups)) {
		g := groups[gk]
		rows := slices.Collect(maps.Values(g.rows))
		slices.SortFunc(rows, func(a, b *rawRow) int {
			if c := cmp.Compare(a.ts, b.ts); c != 0 {
				return c
			}
			return strings.Compare(a.series, b.series)
		})
		if p.Desc {
			slices.Reverse(rows)
		}
		values := rawValues(rows, outputs)
		if len(p.Outputs) == 1 && p.Outputs[0].Transform != nil {
			values = p.Outputs[0].Transform.applyRaw(values)
		}
		if len(p.Outputs) > 0 && p.Outputs[0].Top != nil {
			values = p.selectTop(values)
		}
		if len(p.Outputs) == 1 && p.Outputs[0].Func == "percentile" {
			values = p.rawPercentile(values)
		}
		if len(p.Outputs) == 1 && p.Outputs[0].isSet() {
			values = p.rawSet(values)
		}
		values = p.page(values)
		if len(values) == 0 {
			continue
		}
		row := Row{Name: p.Req.Measurement, Columns: columns, Values: values}
		if p.Grouped {
			row.Tags = map[string]string{}
			for _, t := range g.tags {
				row.Tags[t.Key] = t.Value
			}
		}
		out = append(out, row)
	}
	return out, nil
}

// rawValues lays raw rows out as [time, one value per output].
func rawValues(rows []*rawRow, outputs []Output) [][]any {
	values := make([][]any, 0, len(rows))
	for _, r := range rows {
		v := make([]any, len(outputs)+1)
		v[0] = r.ts
		for i, o := range outputs {
			if o.Tag {
				for _, t := range r.tags {
					if t.Key == o.Field {
						v[i+1] = t.Value
					}
				}
			} else if f, ok := r.fields[o.Field]; ok {
				v[i+1] = f
			}
		}
		values = append(values, v)
	}
	return values
}
