package query

import (
	"fmt"
	"maps"
	"slices"

	"github.com/influxdata/influxql"
)

// A condition is what remains of a WHERE clause once its time bounds are
// taken out: comparisons of a tag with a string (=, !=) or a regex (=~, !~)
// and of a field with a number or another field (=, !=, <, <=, >, >=),
// joined by AND and OR. A missing tag compares as "", as in InfluxDB; a
// comparison with a missing field is false. A name is a field when it is
// typed so (::field) or compared with a number or another name, else a tag.

// CheckTagCond reports why expr is not a tag condition Cairn can evaluate
// (SHOW statements take tag conditions only).
func CheckTagCond(expr influxql.Expr) error {
	_, err := evalCond(expr, func(string) string { return "" }, nil)
	return err
}

// CheckCond reports why expr is not a condition Cairn can evaluate.
func CheckCond(expr influxql.Expr) error {
	_, err := evalCond(expr, func(string) string { return "" }, func(string) (float64, bool) { return 0, false })
	return err
}

// ParseCond parses the Cond of a ShardRequest ("" is no condition).
func ParseCond(s string) (influxql.Expr, error) {
	if s == "" {
		return nil, nil
	}
	e, err := influxql.ParseExpr(s)
	if err != nil {
		return nil, fmt.Errorf("%w: condition: %w", ErrBadQuery, err)
	}
	if err := CheckCond(e); err != nil {
		return nil, err
	}
	return e, nil
}

// MatchTags evaluates a checked tag condition (nil matches everything).
func MatchTags(expr influxql.Expr, tag func(key string) string) bool {
	ok, _ := evalCond(expr, tag, nil)
	return ok
}

// matchRow evaluates a checked condition on one row of a series.
func matchRow(expr influxql.Expr, tag func(key string) string, field func(key string) (float64, bool)) bool {
	ok, _ := evalCond(expr, tag, field)
	return ok
}

// CondFields lists the fields a condition reads, sorted.
func CondFields(expr influxql.Expr) []string {
	seen := map[string]bool{}
	influxql.WalkFunc(expr, func(n influxql.Node) {
		if be, ok := n.(*influxql.BinaryExpr); ok && !isLogical(be.Op) {
			for _, ref := range fieldRefs(be) {
				seen[ref] = true
			}
		}
	})
	return slices.Sorted(maps.Keys(seen))
}

func isLogical(op influxql.Token) bool { return op == influxql.AND || op == influxql.OR }

// fieldRefs are the fields a comparison reads (none for a tag comparison).
func fieldRefs(e *influxql.BinaryExpr) []string {
	l, lok := e.LHS.(*influxql.VarRef)
	r, rok := e.RHS.(*influxql.VarRef)
	switch {
	case lok && rok:
		return []string{l.Val, r.Val}
	case lok && isFieldRef(l, e.RHS):
		return []string{l.Val}
	case rok && isFieldRef(r, e.LHS):
		return []string{r.Val}
	}
	return nil
}

// isFieldRef says whether ref, compared with lit, names a field.
func isFieldRef(ref *influxql.VarRef, lit influxql.Expr) bool {
	switch ref.Type {
	case influxql.Tag:
		return false
	case influxql.Float, influxql.Integer, influxql.Unsigned, influxql.Boolean, influxql.String, influxql.AnyField:
		return true
	}
	switch lit.(type) {
	case *influxql.IntegerLiteral, *influxql.NumberLiteral, *influxql.UnsignedLiteral, *influxql.VarRef:
		return true
	}
	return false
}

// evalCond evaluates expr; field is nil where field conditions are refused.
func evalCond(expr influxql.Expr, tag func(string) string, field func(string) (float64, bool)) (bool, error) {
	switch e := expr.(type) {
	case nil:
		return true, nil
	case *influxql.ParenExpr:
		return evalCond(e.Expr, tag, field)
	case *influxql.BooleanLiteral:
		return e.Val, nil
	case *influxql.BinaryExpr:
		if isLogical(e.Op) {
			l, err := evalCond(e.LHS, tag, field)
			if err != nil {
				return false, err
			}
			r, err := evalCond(e.RHS, tag, field)
			if err != nil {
				return false, err
			}
			if e.Op == influxql.AND {
				return l && r, nil
			}
			return l || r, nil
		}
		if refs := fieldRefs(e); len(refs) > 0 {
			if field == nil {
				return false, fmt.Errorf("%w: condition %s: conditions on field values here (only tag conditions)", ErrUnsupported, e)
			}
			return compareFields(e, field)
		}
		return compareTag(e, tag)
	}
	return false, fmt.Errorf("%w: condition %s", ErrUnsupported, expr)
}

// compareFields evaluates a field comparison: field OP number, number OP
// field or field OP field.
func compareFields(e *influxql.BinaryExpr, field func(string) (float64, bool)) (bool, error) {
	side := func(x influxql.Expr) (float64, bool, error) {
		switch v := x.(type) {
		case *influxql.VarRef:
			if v.Val == "time" {
				return 0, false, fmt.Errorf("%w: condition %s: time can only be bounded (time >, >=, <, <=, = a time) in the top-level AND of WHERE", ErrUnsupported, e)
			}
			f, ok := field(v.Val)
			return f, ok, nil
		case *influxql.IntegerLiteral:
			return float64(v.Val), true, nil
		case *influxql.NumberLiteral:
			return v.Val, true, nil
		case *influxql.UnsignedLiteral:
			return float64(v.Val), true, nil
		}
		return 0, false, fmt.Errorf("%w: condition %s: compare a field with a number or a field", ErrUnsupported, e)
	}
	l, lok, err := side(e.LHS)
	if err != nil {
		return false, err
	}
	r, rok, err := side(e.RHS)
	if err != nil {
		return false, err
	}
	var out bool
	switch e.Op {
	case influxql.EQ:
		out = l == r
	case influxql.NEQ:
		out = l != r
	case influxql.LT:
		out = l < r
	case influxql.LTE:
		out = l <= r
	case influxql.GT:
		out = l > r
	case influxql.GTE:
		out = l >= r
	default:
		return false, fmt.Errorf("%w: condition %s: operator %s on a field (use =, !=, <, <=, >, >=)", ErrUnsupported, e, e.Op)
	}
	return out && lok && rok, nil
}

// compareTag evaluates a tag comparison with a string or a regex.
func compareTag(e *influxql.BinaryExpr, tag func(string) string) (bool, error) {
	ref, lit := e.LHS, e.RHS
	if _, ok := ref.(*influxql.VarRef); !ok {
		ref, lit = lit, ref
	}
	v, ok := ref.(*influxql.VarRef)
	if !ok {
		return false, fmt.Errorf("%w: condition %s: compare a tag with a string or a regex", ErrUnsupported, e)
	}
	if v.Val == "time" {
		return false, fmt.Errorf("%w: condition %s: time can only be bounded (time >, >=, <, <=, = a time) in the top-level AND of WHERE", ErrUnsupported, e)
	}
	got := tag(v.Val)
	switch l := lit.(type) {
	case *influxql.StringLiteral:
		switch e.Op {
		case influxql.EQ:
			return got == l.Val, nil
		case influxql.NEQ:
			return got != l.Val, nil
		}
	case *influxql.RegexLiteral:
		switch e.Op {
		case influxql.EQREGEX:
			return l.Val.MatchString(got), nil
		case influxql.NEQREGEX:
			return !l.Val.MatchString(got), nil
		}
	case *influxql.BooleanLiteral:
		return false, fmt.Errorf("%w: condition %s: conditions on boolean values", ErrUnsupported, e)
	}
	return false, fmt.Errorf("%w: condition %s: operator %s here (tags take =, != with a string, =~, !~ with a regex)", ErrUnsupported, e, e.Op)
}

// equalities returns the tag = 'value' terms of the condition's top-level AND
// with a non-empty value: every matching series has them, so the engine can
// use them to skip series early.
func equalities(expr influxql.Expr, out map[string]string) {
	switch e := expr.(type) {
	case *influxql.ParenExpr:
		equalities(e.Expr, out)
	case *influxql.BinaryExpr:
		switch e.Op {
		case influxql.AND:
			equalities(e.LHS, out)
			equalities(e.RHS, out)
		case influxql.EQ:
			ref, lit := e.LHS, e.RHS
			if _, ok := ref.(*influxql.VarRef); !ok {
				ref, lit = lit, ref
			}
			v, ok1 := ref.(*influxql.VarRef)
			s, ok2 := lit.(*influxql.StringLiteral)
			if ok1 && ok2 && s.Val != "" && !isFieldRef(v, lit) {
				if _, dup := out[v.Val]; !dup {
					out[v.Val] = s.Val // a contradicting second term is left to the full condition
				}
			}
		}
	}
}
