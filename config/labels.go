package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Node labels and weights bounds.
const (
	MaxNodeLabels = 16
	MaxNodeWeight = 1000
)

// ParseLabels reads "key=value,key=value" (node labels, e.g.
// zone=a,rack=r7): keys and values are names ([A-Za-z0-9_-]{1,64}), each
// key once, at most MaxNodeLabels. "" is no labels.
func ParseLabels(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("label %q: want key=value", part)
		case !ValidName(k) || !ValidName(v):
			return nil, fmt.Errorf("label %q: key and value want 1 to 64 letters, digits, '_' or '-'", part)
		case out[k] != "":
			return nil, fmt.Errorf("label key %q given twice", k)
		}
		out[k] = v
	}
	if len(out) > MaxNodeLabels {
		return nil, fmt.Errorf("%d labels: at most %d", len(out), MaxNodeLabels)
	}
	return out, nil
}

// FormatLabels is ParseLabels' input for labels, keys sorted.
func FormatLabels(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}
