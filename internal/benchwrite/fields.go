package benchwrite

import (
	"fmt"
	"strconv"
	"strings"
)

// fieldKinds are the line-protocol field types a mix can hold, in the
// order their fields are written.
var fieldKinds = []string{"float", "int", "uint", "string", "bool"}

// fieldMix is how many fields of each kind every point carries.
type fieldMix [5]int

// parseFields reads "float=2,int=1": kinds with counts (a kind alone
// counts 1). Empty means one float.
func parseFields(s string) (fieldMix, error) {
	var m fieldMix
	if strings.TrimSpace(s) == "" {
		m[0] = 1
		return m, nil
	}
	total := 0
	for part := range strings.SplitSeq(s, ",") {
		name, count, hasCount := strings.Cut(strings.TrimSpace(part), "=")
		n := 1
		if hasCount {
			var err error
			if n, err = strconv.Atoi(count); err != nil || n < 0 || n > 100 {
				return m, fmt.Errorf("count %q of %s: want 0..100", count, name)
			}
		}
		k := kindIndex(name)
		if k < 0 {
			return m, fmt.Errorf("unknown field kind %q (want %s)", name, strings.Join(fieldKinds, ", "))
		}
		m[k] += n
		total += m[k]
	}
	if total == 0 {
		return m, fmt.Errorf("no fields")
	}
	return m, nil
}

func kindIndex(name string) int {
	for i, k := range fieldKinds {
		if k == name {
			return i
		}
	}
	return -1
}

func (m fieldMix) String() string {
	var parts []string
	for i, n := range m {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", fieldKinds[i], n))
		}
	}
	return strings.Join(parts, ",")
}

// appendValues appends the fields of one point ("f0=1.5,i0=3i,...") whose
// values vary with v.
func (m fieldMix) appendValues(b []byte, v int64) []byte {
	first := true
	for k, n := range m {
		for i := range n {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, fieldKinds[k][0])
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, '=')
			switch fieldKinds[k] {
			case "float":
				b = appendQuarters(b, v%1000)
			case "int":
				b = strconv.AppendInt(b, v%100000-50000, 10)
				b = append(b, 'i')
			case "uint":
				b = strconv.AppendInt(b, v%100000, 10)
				b = append(b, 'u')
			case "string":
				b = append(b, `"v`...)
				b = strconv.AppendInt(b, v%64, 10)
				b = append(b, '"')
			case "bool":
				b = strconv.AppendBool(b, v%2 == 0)
			}
		}
	}
	return b
}

// quarterText is the fraction of n/4 as strconv's shortest 'f' format
// writes it.
var quarterText = [4]string{"", ".25", ".5", ".75"}

// appendQuarters appends n/4 (n >= 0) as strconv.AppendFloat(b, n/4, 'f',
// -1, 64) does, without its float formatting.
func appendQuarters(b []byte, n int64) []byte {
	return append(strconv.AppendInt(b, n/4, 10), quarterText[n%4]...)
}
