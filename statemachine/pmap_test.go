package statemachine

import (
	"encoding/json"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Random sets and deletes agree with a Go map, under the real hash and under
// weak ones that force full-hash collisions and the deepest paths; and every
// earlier version stays as it was (snapshots are immutable).
func TestMapMatchesGoMap(t *testing.T) {
	weak := func(mask uint64) func(string) uint64 {
		return func(k string) uint64 {
			h := fnv.New64a()
			h.Write([]byte(k))
			return h.Sum64() & mask
		}
	}
	hashes := map[string]func(string) uint64{
		"real":      phash,
		"all-equal": func(string) uint64 { return 0 },
		"8-bits":    weak(0xff),
		"top-bits":  func(k string) uint64 { return weak(0xf)(k) << 60 },
	}
	for name, h := range hashes {
		t.Run(name, func(t *testing.T) {
			old := phash
			phash = h
			defer func() { phash = old }()
			rng := rand.New(rand.NewPCG(1, 2))
			var m Map[int]
			want := map[string]int{}
			type version struct {
				m    Map[int]
				want map[string]int
			}
			var versions []version
			for i := range 4000 {
				k := "k" + strconv.Itoa(rng.IntN(300))
				if rng.IntN(3) == 0 {
					m = m.Delete(k)
					delete(want, k)
				} else {
					m = m.Set(k, i)
					want[k] = i
				}
				require.Equal(t, len(want), m.Len())
				if i%97 == 0 {
					versions = append(versions, version{m, maps.Clone(want)})
				}
			}
			for _, v := range versions {
				require.Equal(t, v.want, v.m.ToMap())
				require.Equal(t, len(v.want), v.m.Len())
				for k, x := range v.want {
					got, ok := v.m.Get(k)
					require.True(t, ok, k)
					require.Equal(t, x, got)
				}
				require.False(t, v.m.Has("absent"))
			}
			for k := range want {
				m = m.Delete(k)
			}
			require.Zero(t, m.Len())
			require.Nil(t, m.root, "an emptied map holds nothing")
			require.Empty(t, m.ToMap())
		})
	}
}

func TestMapBasics(t *testing.T) {
	var z Map[string]
	require.Zero(t, z.Len())
	require.Equal(t, "", z.At("x"))
	require.Equal(t, z, z.Delete("x"))
	m := MapOf(map[string]string{"b": "2", "a": "1"})
	m2 := m.Set("a", "one")
	require.Equal(t, "1", m.At("a"), "Set leaves the old map as it was")
	require.Equal(t, "one", m2.At("a"))
	require.Equal(t, 2, m2.Len(), "replacing a key does not grow the map")
	require.Equal(t, []string{"a", "b"}, m2.Keys())
	b, err := json.Marshal(m2)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":"one","b":"2"}`, string(b))
	nested := NestedMapOf(map[string]map[string]int{"c": {"x": 1}, "d": {}})
	b, err = json.Marshal(nested)
	require.NoError(t, err)
	require.JSONEq(t, `{"c":{"x":1},"d":{}}`, string(b), "the explore API shows nested maps as objects")
	nested = SetIn(nested, "d", "y", 2)
	nested = DeleteIn(nested, "c", "x")
	require.Equal(t, map[string]int{"y": 2}, nested.At("d").ToMap())
	require.Zero(t, nested.At("c").Len())
	require.Equal(t, nested, DeleteIn(nested, "nope", "x"))
	n := 0
	for range m2.All() {
		n++
		break
	}
	require.Equal(t, 1, n, "All stops when the loop does")
}

// Within a batch (one token) changes edit the batch's own nodes in place;
// every Map published before the batch stays exactly as it was, and the
// result agrees with a Go map.
func TestMapBatchesEditOnlyTheirOwnNodes(t *testing.T) {
	for name, h := range map[string]func(string) uint64{"real": phash, "8-bits": func(k string) uint64 { return uint64(len(k)*31+int(k[len(k)-1])) & 0xff }} {
		t.Run(name, func(t *testing.T) {
			old := phash
			phash = h
			defer func() { phash = old }()
			rng := rand.New(rand.NewPCG(3, 4))
			var m Map[int]
			want := map[string]int{}
			type version struct {
				m    Map[int]
				want map[string]int
			}
			var published []version
			for batch := range 60 {
				tok := new(ptoken)
				for i := range 50 {
					k := "k" + strconv.Itoa(rng.IntN(400))
					if rng.IntN(3) == 0 {
						m = m.del(tok, k)
						delete(want, k)
					} else {
						m = m.set(tok, k, batch*100+i)
						want[k] = batch*100 + i
					}
				}
				require.Equal(t, want, m.ToMap())
				require.Equal(t, len(want), m.Len())
				published = append(published, version{m, maps.Clone(want)})
				for _, v := range published {
					require.Equal(t, v.want, v.m.ToMap(), "a published version changed")
				}
			}
		})
	}
}
