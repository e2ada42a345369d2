package console

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// bigCluster is the scale the console promises to draw quickly: 1,000 shards
// over 10 storage nodes, with some shards offline and some replicas syncing so
// every cell style is exercised.
func bigCluster() *fakeAPI {
	api := newFakeAPI(10)
	db := api.addDB("big", "default", 1000, 3)
	api.set(func(f *fakeAPI) {
		for i, s := range db.shards {
			switch {
			case i%97 == 5:
				s.Status, s.Leader, s.ISR, s.Reason = "offline", "", nil, "no replica alive"
			case i%13 == 4:
				s.ISR = s.ISR[:2]
			}
		}
	})
	return api
}

// firstRender loads the page straight onto the shard map and waits for the
// full grid. It returns the render cost the page measured itself (building
// the HTML, parsing it and laying out the table).
func firstRender(c *console) float64 {
	c.do(chromedp.Navigate("about:blank"))
	c.do(chromedp.Navigate(c.srv.URL + "/#shards"))
	c.waitJS(`window.cairnConsole && cairnConsole.stats.shardFullRenders > 0 && ` + cellsJS(``) + ` === 10000`)
	return evalJS[float64](c, `cairnConsole.stats.lastShardRenderMs`)
}

func TestConsoleLargeShardMap(t *testing.T) {
	c := newConsole(t, bigCluster())
	ms := firstRender(c)
	t.Logf("first render of 1,000 shards x 10 nodes: %.1f ms (stats %v)", ms, evalJS[map[string]float64](c, `cairnConsole.stats`))
	require.Equal(t, 1000, evalJS[int](c, cellsJS(`[data-role=leader]`))+
		evalJS[int](c, `document.querySelectorAll("#shard-map tr.offline").length`))
	require.Equal(t, 11, evalJS[int](c, `document.querySelectorAll("#shard-map tr.offline").length`))

	// A poll that brings identical data must not touch the grid, and a change
	// to one shard must patch one row, not rebuild 10,000 cells.
	renders := evalJS[int](c, `cairnConsole.stats.shardRenders`)
	c.waitJS(fmt.Sprintf(`cairnConsole.stats.shardRenders > %d`, renders))
	require.Equal(t, 1, evalJS[int](c, `cairnConsole.stats.shardFullRenders`))
	require.Zero(t, evalJS[int](c, `cairnConsole.stats.shardRowPatches`))
	c.do(chromedp.SetAttributeValue(chromedp.CSS(`#shard-map`), "data-probe", "kept"))
	c.api.set(func(f *fakeAPI) { s := f.dbs["big"].shards[0]; s.Leader = s.Replicas[1]; s.Term++ })
	c.waitJS(`document.querySelector('#shard-map td[data-shard="0"][data-node="n-2"]').dataset.role === "leader"`)
	require.Equal(t, 1, evalJS[int](c, `cairnConsole.stats.shardFullRenders`))
	require.Equal(t, 1, evalJS[int](c, `cairnConsole.stats.shardRowPatches`))
	require.Equal(t, "kept", evalJS[string](c, `document.getElementById("shard-map").dataset.probe`))
}

// BenchmarkShardMapFirstRender reports the wall time from navigation to a
// complete 1,000 x 10 grid (ns/op) and the page's own render cost (render-ms).
func BenchmarkShardMapFirstRender(b *testing.B) {
	c := newConsole(b, bigCluster())
	total := 0.0
	for b.Loop() {
		total += firstRender(c)
	}
	b.ReportMetric(total/float64(b.N), "render-ms")
}
