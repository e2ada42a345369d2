package query

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/influxdata/influxql"
)

// SeriesInfo is one stored series, parsed from its series key.
type SeriesInfo struct {
	Measurement string
	Tags        []lineproto.Tag // sorted by key
	Field       string
}

// ParseSeries parses lineproto series keys, dropping duplicates: the
// fields of one tag set live on different shards, and a shard may list a key
// twice while it flushes.
func ParseSeries(keys []string) ([]SeriesInfo, error) {
	slices.Sort(keys)
	keys = slices.Compact(keys)
	out := make([]SeriesInfo, 0, len(keys))
	for _, k := range keys {
		m, tags, f, err := lineproto.ParseSeriesKey(k)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadWire, err)
		}
		out = append(out, SeriesInfo{Measurement: m, Tags: tags, Field: f})
	}
	return out, nil
}

// ShowPlan is a checked SHOW statement over the series of a database.
type ShowPlan struct {
	stmt    influxql.Statement
	sources []*influxql.Measurement
	cond    influxql.Expr
}

// PlanShow checks a SHOW MEASUREMENTS / TAG KEYS / TAG VALUES / FIELD KEYS /
// SERIES statement; the others (SHOW DATABASES, RETENTION POLICIES) need no
// series and are the caller's.
func PlanShow(stmt influxql.Statement, now time.Time) (*ShowPlan, error) {
	p := &ShowPlan{stmt: stmt}
	var cond influxql.Expr
	var sources influxql.Sources
	switch s := stmt.(type) {
	case *influxql.ShowMeasurementsStatement:
		cond = s.Condition
		if s.Source != nil {
			sources = influxql.Sources{s.Source}
		}
	case *influxql.ShowTagKeysStatement:
		cond, sources = s.Condition, s.Sources
	case *influxql.ShowTagValuesStatement:
		cond, sources = s.Condition, s.Sources
		switch s.Op {
		case influxql.EQ, influxql.NEQ, influxql.EQREGEX, influxql.NEQREGEX, influxql.IN:
		default:
			return nil, unsupported("WITH KEY " + s.Op.String())
		}
	case *influxql.ShowFieldKeysStatement:
		sources = s.Sources
	case *influxql.ShowSeriesStatement:
		cond, sources = s.Condition, s.Sources
	case *influxql.ShowSeriesCardinalityStatement:
		cond, sources = s.Condition, s.Sources
		if len(s.Dimensions) > 0 {
			return nil, unsupported("SHOW SERIES CARDINALITY ... GROUP BY")
		}
	case *influxql.ShowMeasurementCardinalityStatement:
		cond, sources = s.Condition, s.Sources
		if len(s.Dimensions) > 0 {
			return nil, unsupported("SHOW MEASUREMENT CARDINALITY ... GROUP BY")
		}
	default:
		return nil, unsupported(stmt.String())
	}
	for _, src := range sources {
		m, ok := src.(*influxql.Measurement)
		if !ok {
			return nil, unsupported("subqueries in SHOW")
		}
		p.sources = append(p.sources, m)
	}
	// Time bounds are accepted and ignored: the series index has no time.
	rest, _, _, err := SplitTime(cond, now)
	if err == nil {
		err = CheckTagCond(rest)
	}
	if err != nil {
		return nil, err
	}
	p.cond = rest
	return p, nil
}

// Measurement is the one measurement the statement is about, "" when it
// may touch several: shards then list only that measurement's series.
func (p *ShowPlan) Measurement() string {
	if len(p.sources) == 1 && p.sources[0].Regex == nil {
		return p.sources[0].Name
	}
	return ""
}

func (p *ShowPlan) wants(measurement string) bool {
	if len(p.sources) == 0 {
		return true
	}
	for _, m := range p.sources {
		if m.Regex != nil && m.Regex.Val.MatchString(measurement) || m.Regex == nil && m.Name == measurement {
			return true
		}
	}
	return false
}

func tagOf(tags []lineproto.Tag) func(string) string {
	return func(k string) string {
		for _, t := range tags {
			if t.Key == k {
				return t.Value
			}
		}
		return ""
	}
}

// Run answers the statement from the database's series.
func (p *ShowPlan) Run(series []SeriesInfo, types models.FieldTypes) []Row {
	var kept []SeriesInfo
	for _, s := range series {
		if p.wants(s.Measurement) && MatchTags(p.cond, tagOf(s.Tags)) {
			kept = append(kept, s)
		}
	}
	switch s := p.stmt.(type) {
	case *influxql.ShowMeasurementsStatement:
		set := map[string]bool{}
		for _, si := range kept {
			set[si.Measurement] = true
		}
		return oneRow("measurements", []string{"name"}, page(single(slices.Sorted(maps.Keys(set))), s.Limit, s.Offset))
	case *influxql.ShowTagKeysStatement:
		return perMeasurement(kept, []string{"tagKey"}, s.Limit, s.Offset, func(si SeriesInfo, add func(...string)) {
			for _, t := range si.Tags {
				add(t.Key)
			}
		})
	case *influxql.ShowTagValuesStatement:
		keyOK := tagKeyFilter(s.Op, s.TagKeyExpr)
		return perMeasurement(kept, []string{"key", "value"}, s.Limit, s.Offset, func(si SeriesInfo, add func(...string)) {
			for _, t := range si.Tags {
				if keyOK(t.Key) {
					add(t.Key, t.Value)
				}
			}
		})
	case *influxql.ShowFieldKeysStatement:
		return perMeasurement(kept, []string{"fieldKey", "fieldType"}, s.Limit, s.Offset, func(si SeriesInfo, add func(...string)) {
			add(si.Field, types[si.Measurement][si.Field].String())
		})
	case *influxql.ShowSeriesStatement:
		set := map[string]bool{}
		for _, si := range kept {
			set[seriesKeyText(si)] = true
		}
		rows := oneRow("", []string{"key"}, page(single(slices.Sorted(maps.Keys(set))), s.Limit, s.Offset))
		return rows
	case *influxql.ShowSeriesCardinalityStatement:
		return seriesCardinality(kept, s.Exact || len(s.Sources) > 0 || s.Condition != nil)
	case *influxql.ShowMeasurementCardinalityStatement:
		return measurementCardinality(kept, s.Exact || len(s.Sources) > 0 || s.Condition != nil)
	}
	return nil
}

// seriesCardinality answers SHOW SERIES CARDINALITY: over the whole
// database InfluxDB answers its estimate (exact here), otherwise (EXACT, FROM
// or WHERE) a count per measurement.
func seriesCardinality(kept []SeriesInfo, perMeasurement bool) []Row {
	counts := map[string]map[string]bool{}
	total := 0
	for _, si := range kept {
		set := counts[si.Measurement]
		if set == nil {
			set = map[string]bool{}
			counts[si.Measurement] = set
		}
		if k := seriesKeyText(si); !set[k] {
			set[k] = true
			total++
		}
	}
	if !perMeasurement {
		return []Row{{Columns: []string{"cardinality estimation"}, Values: [][]any{{int64(total)}}}}
	}
	var rows []Row
	for _, m := range slices.Sorted(maps.Keys(counts)) {
		rows = append(rows, Row{Name: m, Columns: []string{"count"}, Values: [][]any{{int64(len(counts[m]))}}})
	}
	return rows
}

// measurementCardinality answers SHOW MEASUREMENT CARDINALITY: the estimate
// (exact here) over the whole database, else the count of those matching,
// no answer when none does.
func measurementCardinality(kept []SeriesInfo, exact bool) []Row {
	set := map[string]bool{}
	for _, si := range kept {
		set[si.Measurement] = true
	}
	if !exact {
		return []Row{{Columns: []string{"cardinality estimation"}, Values: [][]any{{int64(len(set))}}}}
	}
	if len(set) == 0 {
		return nil
	}
	return []Row{{Columns: []string{"count"}, Values: [][]any{{int64(len(set))}}}}
}

// seriesKeyText is SHOW SERIES' key: measurement,tag=value,... escaped as in
// line protocol.
func seriesKeyText(si SeriesInfo) string {
	esc := strings.NewReplacer(",", `\,`, "=", `\=`, " ", `\ `)
	var b strings.Builder
	b.WriteString(strings.NewReplacer(",", `\,`, " ", `\ `).Replace(si.Measurement))
	for _, t := range si.Tags {
		b.WriteByte(',')
		b.WriteString(esc.Replace(t.Key))
		b.WriteByte('=')
		b.WriteString(esc.Replace(t.Value))
	}
	return b.String()
}

func tagKeyFilter(op influxql.Token, expr influxql.Literal) func(string) bool {
	switch e := expr.(type) {
	case *influxql.StringLiteral:
		if op == influxql.NEQ {
			return func(k string) bool { return k != e.Val }
		}
		return func(k string) bool { return k == e.Val }
	case *influxql.RegexLiteral:
		re := e.Val
		if re == nil {
			re = regexp.MustCompile("")
		}
		if op == influxql.NEQREGEX {
			return func(k string) bool { return !re.MatchString(k) }
		}
		return func(k string) bool { return re.MatchString(k) }
	case *influxql.ListLiteral:
		return func(k string) bool { return slices.Contains(e.Vals, k) }
	}
	return func(string) bool { return false }
}

func single(vals []string) [][]any {
	out := make([][]any, len(vals))
	for i, v := range vals {
		out[i] = []any{v}
	}
	return out
}

func page(values [][]any, limit, offset int) [][]any {
	if offset > 0 {
		values = values[min(offset, len(values)):]
	}
	if limit > 0 && len(values) > limit {
		values = values[:limit]
	}
	return values
}

func oneRow(name string, columns []string, values [][]any) []Row {
	if len(values) == 0 {
		return nil
	}
	return []Row{{Name: name, Columns: columns, Values: values}}
}

// perMeasurement builds one result series per measurement, of distinct
// values sorted as strings.
func perMeasurement(series []SeriesInfo, columns []string, limit, offset int, each func(SeriesInfo, func(...string))) []Row {
	byM := map[string]map[string][]any{}
	for _, si := range series {
		set := byM[si.Measurement]
		if set == nil {
			set = map[string][]any{}
			byM[si.Measurement] = set
		}
		each(si, func(v ...string) {
			row := make([]any, len(v))
			for i, s := range v {
				row[i] = s
			}
			set[strings.Join(v, "\x00")] = row
		})
	}
	var rows []Row
	for _, m := range slices.Sorted(maps.Keys(byM)) {
		set := byM[m]
		var values [][]any
		for _, k := range slices.Sorted(maps.Keys(set)) {
			values = append(values, set[k])
		}
		rows = append(rows, oneRow(m, columns, page(values, limit, offset))...)
	}
	return rows
}

// ShowDatabases answers SHOW DATABASES.
func ShowDatabases(names []string) []Row {
	return []Row{{Name: "databases", Columns: []string{"name"}, Values: single(slices.Sorted(slices.Values(names)))}}
}
