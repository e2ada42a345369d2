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

// Numeric says whether the values add up (sum, mean, ...): float, integer
// and unsigned.
func (t FieldType) Numeric() bool { return t <= FieldUnsigned }
