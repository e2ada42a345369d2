package query

import (
	"fmt"

	"github.com/cairn-db/cairn/models"
)

// Partial is the running state of one aggregate bucket; two Partials of the
// same bucket merge (Merge) into the state of their union. Count and sum are
// all a mean, sum or count needs; the other statistics sit behind X, which is
// nil unless the request asks for one of them (NeedsExtra), so the buckets of
// the common aggregates stay small.
type Partial struct {
	Count int64
	Sum   float64
	X     *Extra
}

// Extra is the part of a Partial that only some aggregates need.
type Extra struct {
	Min, Max        float64
	MinTS, MaxTS    int64
	First, Last     float64
	FirstTS, LastTS int64
	// FirstS and LastS are first and last of a string field (First and
	// Last are 0 there).
	FirstS, LastS string
	M2            float64 // Σ(x-mean)², with mean = Sum/Count
	Values        []float64
}

// NeedsExtra says whether partials for st keep an Extra.
func NeedsExtra(st Stats) bool { return st&^StatSum != 0 }

// Add folds one point in; p.X must be set when NeedsExtra(st) (it is
// allocated otherwise). Ties on time keep the larger value, for first and
// last alike, so the answer does not depend on which shard saw which point.
func (p *Partial) Add(ts int64, v float64, st Stats) { p.add(ts, v, "", st) }

// AddString folds one point of a string field in: it counts, and is first
// and last (ties keep the larger string); what adds numbers up sees 0.
func (p *Partial) AddString(ts int64, s string, st Stats) { p.add(ts, 0, s, st) }

func (p *Partial) add(ts int64, v float64, s string, st Stats) {
	if !NeedsExtra(st) {
		p.Count++
		p.Sum += v
		return
	}
	if p.X == nil {
		p.X = &Extra{}
	}
	x := p.X
	if p.Count == 0 {
		p.Count, p.Sum = 1, v
		x.Min, x.Max, x.MinTS, x.MaxTS = v, v, ts, ts
		x.First, x.Last, x.FirstTS, x.LastTS = v, v, ts, ts
		x.FirstS, x.LastS = s, s
		if st&StatValues != 0 {
			x.Values = append(x.Values, v)
		}
		return
	}
	if st&StatM2 != 0 {
		// Welford: the mean before and after this point.
		mean := p.Sum / float64(p.Count)
		x.M2 += (v - mean) * (v - (p.Sum+v)/float64(p.Count+1))
	}
	p.Count++
	p.Sum += v
	// Only what the request ships is kept up to date.
	if st&StatMinMax != 0 {
		x.addMinMax(v, ts, v, ts)
	}
	if st&(StatFirst|StatLast) != 0 {
		x.addFirstLast(v, s, ts, v, s, ts)
	}
	if st&StatValues != 0 {
		x.Values = append(x.Values, v)
	}
}

func (x *Extra) addMinMax(min float64, minTS int64, max float64, maxTS int64) {
	if min < x.Min || min == x.Min && minTS < x.MinTS {
		x.Min, x.MinTS = min, minTS
	}
	if max > x.Max || max == x.Max && maxTS < x.MaxTS {
		x.Max, x.MaxTS = max, maxTS
	}
}

func (x *Extra) addFirstLast(first float64, firstS string, firstTS int64, last float64, lastS string, lastTS int64) {
	if firstTS < x.FirstTS || firstTS == x.FirstTS && (first > x.First || first == x.First && firstS > x.FirstS) {
		x.First, x.FirstS, x.FirstTS = first, firstS, firstTS
	}
	if lastTS > x.LastTS || lastTS == x.LastTS && (last > x.Last || last == x.Last && lastS > x.LastS) {
		x.Last, x.LastS, x.LastTS = last, lastS, lastTS
	}
}

// Merge folds o into p (Chan et al.'s parallel variance for M2). p never
// shares o's Extra afterwards.
func (p *Partial) Merge(o *Partial) {
	switch {
	case o.Count == 0:
		return
	case p.Count == 0:
		p.Count, p.Sum = o.Count, o.Sum
		if o.X != nil {
			if p.X == nil {
				p.X = &Extra{}
			}
			values := append(p.X.Values[:0], o.X.Values...)
			*p.X = *o.X
			p.X.Values = values
		}
		return
	}
	na, nb := float64(p.Count), float64(o.Count)
	delta := o.Sum/nb - p.Sum/na
	p.Count += o.Count
	p.Sum += o.Sum
	if o.X == nil {
		return
	}
	if p.X == nil {
		p.X = &Extra{}
	}
	x := p.X
	x.M2 += o.X.M2 + delta*delta*na*nb/(na+nb)
	x.addMinMax(o.X.Min, o.X.MinTS, o.X.Max, o.X.MaxTS)
	x.addFirstLast(o.X.First, o.X.FirstS, o.X.FirstTS, o.X.Last, o.X.LastS, o.X.LastTS)
	x.Values = append(x.Values, o.X.Values...)
}

// FieldBuckets are one field's buckets in one group, dense: Parts[i] is the
// bucket starting at First + i*Step (Step 0: the one bucket of a query
// without GROUP BY time); an empty bucket has Count 0. A shard's arrays
// cover the span its points reached; the broker merges them slot by slot.
type FieldBuckets struct {
	Field string
	Type  models.FieldType // of the field's points
	First int64
	Step  int64
	Parts []Partial
}

// Start is the start time of slot i.
func (f *FieldBuckets) Start(i int) int64 { return f.First + int64(i)*f.Step }

// At is the bucket starting at t, nil when none or empty.
func (f *FieldBuckets) At(t int64) *Partial {
	if len(f.Parts) == 0 {
		return nil
	}
	i := int64(0)
	if f.Step > 0 {
		d := t - f.First
		if d < 0 || d%f.Step != 0 {
			return nil
		}
		i = d / f.Step
	} else if t != f.First {
		return nil
	}
	if i >= int64(len(f.Parts)) || f.Parts[i].Count == 0 {
		return nil
	}
	return &f.Parts[i]
}

// MergeFieldBuckets folds b into a, slot by slot, and returns the result,
// which may reuse (and change) either one's storage. Both must be on the
// same grid (same Step, First apart by a multiple of it), as the buckets of
// one request are; ErrBadWire otherwise.
func MergeFieldBuckets(a, b FieldBuckets) (FieldBuckets, error) {
	switch {
	case len(b.Parts) == 0:
		return a, nil
	case len(a.Parts) == 0:
		return b, nil
	case a.Step != b.Step || a.Step == 0 && a.First != b.First || a.Step > 0 && (b.First-a.First)%a.Step != 0:
		return a, fmt.Errorf("%w: buckets of field %q on different time grids", ErrBadWire, a.Field)
	}
	if a.Type != b.Type {
		// Shards keep their own types: integers beside floats add up as
		// floats (InfluxDB's cast); anything else keeps a's.
		if a.Type.Numeric() && b.Type.Numeric() {
			a.Type, b.Type = models.FieldFloat, models.FieldFloat
		}
		b.Type = a.Type
	}
	if b.First < a.First || b.Start(len(b.Parts)) > a.Start(len(a.Parts)) {
		a, b = grow(a, b), a
	}
	off := 0
	if a.Step > 0 {
		off = int((b.First - a.First) / a.Step)
	}
	for i := range b.Parts {
		if b.Parts[i].Count > 0 {
			a.Parts[off+i].Merge(&b.Parts[i])
		}
	}
	return a, nil
}

// grow returns a copy of b widened to cover a's span too, holding b's
// buckets; the caller then merges a into it.
func grow(a, b FieldBuckets) FieldBuckets {
	first := min(a.First, b.First)
	last := max(a.Start(len(a.Parts)-1), b.Start(len(b.Parts)-1))
	out := FieldBuckets{Field: b.Field, Type: b.Type, First: first, Step: b.Step, Parts: make([]Partial, (last-first)/b.Step+1)}
	copy(out.Parts[(b.First-first)/b.Step:], b.Parts)
	return out
}
