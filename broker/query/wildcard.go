package query

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cairn-db/cairn/models"
	"github.com/influxdata/influxql"
)

// An aggregate over every field (count(*), mean(/^v/)) reads every field on
// the shards and becomes one column per field found, named fn_field, in the
// order of the select list and of the field names, as in InfluxDB.
// count(distinct(f)) counts the distinct values of f from the values the
// shards keep for median (StatValues), within the same bound.

// planArgument reads the argument of an aggregate call into out: the field
// it reads (nil for * and a regex, which read every field).
func (p *Plan) planArgument(e *influxql.Call, out *Output) (*influxql.VarRef, error) {
	switch a := e.Args[0].(type) {
	case *influxql.VarRef:
		return a, nil
	case *influxql.Wildcard, *influxql.RegexLiteral:
		if _, ok := transforms[e.Name]; ok {
			break
		}
		out.Field = "*"
		if re, ok := a.(*influxql.RegexLiteral); ok {
			out.Match = re.Val
		}
		p.Req.AllFields = true
		return nil, nil
	case *influxql.Call:
		ref, ok := a.Args[0].(*influxql.VarRef)
		if e.Name == "count" && a.Name == "distinct" && len(a.Args) == 1 && ok {
			out.Func = "count_distinct"
			return ref, nil
		}
	}
	return nil, unsupported(fmt.Sprintf("%s(%s) (the argument must be a field key, * or a regex)", e.Name, e.Args[0]))
}

// expandFields is p with every "*" output replaced by one output per field
// of fields it matches.
func (p *Plan) expandFields(fields map[string]bool, types map[string]models.FieldType) *Plan {
	if !p.wildcardFuncs() {
		return p
	}
	names := slices.Sorted(maps.Keys(fields))
	q := *p
	q.Outputs = nil
	for _, o := range p.Outputs {
		if o.Field != "*" {
			q.Outputs = append(q.Outputs, o)
			continue
		}
		for _, f := range names {
			// A field of a type the function does not take (mean of
			// strings) is skipped, as InfluxDB does.
			if (o.Match == nil || o.Match.MatchString(f)) && unsupportedFor(o.Func, types[f]) == nil {
				e := o
				e.Name, e.Field, e.Match = o.Name+"_"+f, f, nil
				q.Outputs = append(q.Outputs, e)
			}
		}
	}
	return &q
}

func (p *Plan) wildcardFuncs() bool {
	for _, o := range p.Outputs {
		if o.Field == "*" {
			return true
		}
	}
	return false
}

// wildcardColumns are the columns of rows from several measurements whose
// fields "*" outputs expanded to: each such output's over the union of the
// fields.
func (p *Plan) wildcardColumns(rows []Row) []string {
	fields := map[string]bool{}
	for _, r := range rows {
		for _, c := range r.Columns[1:] {
			for _, o := range p.Outputs {
				if f, ok := strings.CutPrefix(c, o.Name+"_"); ok && o.Field == "*" {
					fields[f] = true
				}
			}
		}
	}
	cols := []string{"time"}
	for _, o := range p.expandFields(fields, nil).Outputs {
		cols = append(cols, o.Name)
	}
	return cols
}

// countDistinct is the number of distinct values among v.
func countDistinct(v []float64) int64 {
	seen := make(map[float64]struct{}, len(v))
	for _, x := range v {
		seen[x] = struct{}{}
	}
	return int64(len(seen))
}
