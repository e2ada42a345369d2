package query

import (
	"fmt"

	"github.com/influxdata/influxql"
)

// A tag condition is what remains of a WHERE clause once its time bounds are
// taken out: comparisons of a tag with a string (=, !=) or a regex (=~, !~),
// joined by AND and OR. A missing tag compares as "", as in InfluxDB.

// CheckTagCond reports why expr is not a tag condition Cairn can evaluate.
func CheckTagCond(expr influxql.Expr) error {
	_, err := matchTags(expr, func(string) string { return "" })
	return err
}

// ParseTagCond parses the Cond of a ShardRequest ("" is no condition).
func ParseTagCond(s string) (influxql.Expr, error) {
	if s == "" {
		return nil, nil
	}
	e, err := influxql.ParseExpr(s)
	if err != nil {
		return nil, fmt.Errorf("%w: condition: %w", ErrBadQuery, err)
	}
	if err := CheckTagCond(e); err != nil {
		return nil, err
	}
	return e, nil
}

// MatchTags evaluates a checked tag condition (nil matches everything).
func MatchTags(expr influxql.Expr, tag func(key string) string) bool {
	if expr == nil {
		return true
	}
	ok, _ := matchTags(expr, tag)
	return ok
}

func matchTags(expr influxql.Expr, tag func(string) string) (bool, error) {
	switch e := expr.(type) {
	case nil:
		return true, nil
	case *influxql.ParenExpr:
		return matchTags(e.Expr, tag)
	case *influxql.BooleanLiteral:
		return e.Val, nil
	case *influxql.BinaryExpr:
		switch e.Op {
		case influxql.AND, influxql.OR:
			l, err := matchTags(e.LHS, tag)
			if err != nil {
				return false, err
			}
			r, err := matchTags(e.RHS, tag)
			if err != nil {
				return false, err
			}
			if e.Op == influxql.AND {
				return l && r, nil
			}
			return l || r, nil
		}
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
		case *influxql.IntegerLiteral, *influxql.NumberLiteral, *influxql.BooleanLiteral, *influxql.UnsignedLiteral:
			return false, fmt.Errorf("%w: condition %s: conditions on field values (only tag conditions and time bounds are)", ErrUnsupported, e)
		}
		return false, fmt.Errorf("%w: condition %s: operator %s here (tags take =, != with a string, =~, !~ with a regex)", ErrUnsupported, e, e.Op)
	}
	return false, fmt.Errorf("%w: condition %s", ErrUnsupported, expr)
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
			if ok1 && ok2 && s.Val != "" {
				if _, dup := out[v.Val]; !dup {
					out[v.Val] = s.Val // a contradicting second term is left to the full condition
				}
			}
		}
	}
}
