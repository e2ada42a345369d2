package query

import (
	"fmt"

	"github.com/influxdata/influxql"
)

// Math in the select list over one aggregate and number literals
// (mean(value)*100, (max(v) - 10) / 2): the aggregate runs as usual and
// the arithmetic on its merged value, as InfluxDB computes it: integers
// stay integers under + - *, a division is a float, and dividing by zero
// is 0.

// planMath reads an expression over exactly one aggregate call into out;
// it returns that call.
func planMath(e influxql.Expr) (*influxql.Call, error) {
	var call *influxql.Call
	var walk func(e influxql.Expr) error
	walk = func(e influxql.Expr) error {
		switch x := e.(type) {
		case *influxql.ParenExpr:
			return walk(x.Expr)
		case *influxql.BinaryExpr:
			switch x.Op {
			case influxql.ADD, influxql.SUB, influxql.MUL, influxql.DIV:
			default:
				return unsupported(fmt.Sprintf("the operator %s in SELECT", x.Op))
			}
			if err := walk(x.LHS); err != nil {
				return err
			}
			return walk(x.RHS)
		case *influxql.IntegerLiteral, *influxql.NumberLiteral:
			return nil
		case *influxql.Call:
			if call != nil {
				return unsupported("math over several aggregates")
			}
			call = x
			return nil
		}
		return unsupported(fmt.Sprintf("the expression %s in SELECT (math over one aggregate and numbers)", e))
	}
	if err := walk(e); err != nil {
		return nil, err
	}
	if call == nil {
		return nil, unsupported(fmt.Sprintf("the expression %s in SELECT (math over one aggregate and numbers)", e))
	}
	return call, nil
}

// evalMath is e with its aggregate call worth v.
func evalMath(e influxql.Expr, v Cell) Cell {
	switch x := e.(type) {
	case *influxql.ParenExpr:
		return evalMath(x.Expr, v)
	case *influxql.Call:
		return v
	case *influxql.IntegerLiteral:
		return Cell{Kind: CellInt, I: x.Val}
	case *influxql.NumberLiteral:
		return floatCell(x.Val)
	case *influxql.BinaryExpr:
		l, r := evalMath(x.LHS, v), evalMath(x.RHS, v)
		if l.Kind == CellNull || r.Kind == CellNull {
			return Cell{}
		}
		if l.Kind == CellInt && r.Kind == CellInt && x.Op != influxql.DIV {
			switch x.Op {
			case influxql.ADD:
				return Cell{Kind: CellInt, I: l.I + r.I}
			case influxql.SUB:
				return Cell{Kind: CellInt, I: l.I - r.I}
			default:
				return Cell{Kind: CellInt, I: l.I * r.I}
			}
		}
		a, b := l.float(), r.float()
		switch x.Op {
		case influxql.ADD:
			return floatCell(a + b)
		case influxql.SUB:
			return floatCell(a - b)
		case influxql.MUL:
			return floatCell(a * b)
		}
		if b == 0 {
			return floatCell(0)
		}
		return floatCell(a / b)
	}
	return Cell{}
}
