//go:build !race

package influx

const raceEnabled = false
