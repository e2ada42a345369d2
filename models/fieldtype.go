package models

import "fmt"

// FieldType is the type of a field's values, InfluxDB's five: a field keeps
// one type per measurement in a shard, and a point of another type is
// refused (ErrFieldTypeConflict). The zero value is float, the type of every
// field stored before types were kept.
type FieldType uint8

// The field types, as line protocol writes them: 1.5, 1i, 1u, true, "s".
const (
	FieldFloat FieldType = iota
	FieldInteger
	FieldUnsigned
	FieldBoolean
	FieldString
	numFieldTypes
)

var fieldTypeNames = [numFieldTypes]string{"float", "integer", "unsigned", "boolean", "string"}

// String is InfluxDB's name of the type (SHOW FIELD KEYS, conflicts).
func (t FieldType) String() string {
	if t < numFieldTypes {
		return fieldTypeNames[t]
	}
	return fmt.Sprintf("fieldtype(%d)", uint8(t))
}

// Valid says whether t is one of the five types.
func (t FieldType) Valid() bool { return t < numFieldTypes }

// MarshalText writes the type's name, so JSON maps and values read
// "integer", not 1.
func (t FieldType) MarshalText() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("field type %d", uint8(t))
	}
	return []byte(t.String()), nil
}

// UnmarshalText reads a type's name.
func (t *FieldType) UnmarshalText(b []byte) error {
	for i, name := range fieldTypeNames {
		if string(b) == name {
			*t = FieldType(i)
			return nil
		}
	}
	return fmt.Errorf("unknown field type %q", b)
}

// FieldTypes is the type of each field, by measurement and field.
type FieldTypes map[string]map[string]FieldType

// Add adds o's types to ft; a field typed differently by two shards (each
// keeps its own) is a float when both are numbers, else it keeps the first
// seen.
func (ft FieldTypes) Add(o FieldTypes) {
	for m, fields := range o {
		if ft[m] == nil {
			ft[m] = make(map[string]FieldType, len(fields))
		}
		for f, t := range fields {
			if old, ok := ft[m][f]; !ok {
				ft[m][f] = t
			} else if old != t && old.Numeric() && t.Numeric() {
				ft[m][f] = FieldFloat
			}
		}
	}
}

// SeriesList is a shard's series keys with the types of their
// measurements' fields (the internal API's series list, types=1).
type SeriesList struct {
	Keys  []string   `json:"keys"`
	Types FieldTypes `json:"field_types"`
}

// Numeric says whether the values add up (sum, mean, ...): float, integer
// and unsigned.
func (t FieldType) Numeric() bool { return t <= FieldUnsigned }
