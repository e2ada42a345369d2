package console

import (
	"fmt"
	"testing"

	"github.com/cairn-db/cairn/web/console/browsertest"
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
	c.Do(chromedp.Navigate("about:blank"))
	c.Do(chromedp.Navigate(c.srv.URL + "/#shards"))
	c.WaitJS(`window.cairnConsole && cairnConsole.stats.shardFullRenders > 0 && ` + cellsJS(``) + ` === 10000`)
	return browsertest.Eval[float64](c.Page, `cairnConsole.stats.lastShardRenderMs`)
}

func TestConsoleLargeShardMap(t *testing.T) {
	c := newConsole(t, bigCluster())
	ms := firstRender(c)
	t.Logf("first render of 1,000 shards x 10 nodes: %.1f ms (stats %v)", ms, browsertest.Eval[map[string]float64](c.Page, `cairnConsole.stats`))
	require.Equal(t, 1000, browsertest.Eval[int](c.Page, cellsJS(`[data-role=leader]`))+
		browsertest.Eval[int](c.Page, `document.querySelectorAll("#shard-map tr.offline").length`))
	require.Equal(t, 11, browsertest.Eval[int](c.Page, `document.querySelectorAll("#shard-map tr.offline").length`))

	// A poll that brings identical data must not touch the grid, and a change
	// to one shard must patch one row, not rebuild 10,000 cells.
	renders := browsertest.Eval[int](c.Page, `cairnConsole.stats.shardRenders`)
	c.WaitJS(fmt.Sprintf(`cairnConsole.stats.shardRenders > %d`, renders))
	require.Equal(t, 1, browsertest.Eval[int](c.Page, `cairnConsole.stats.shardFullRenders`))
	require.Zero(t, browsertest.Eval[int](c.Page, `cairnConsole.stats.shardRowPatches`))
	c.Do(chromedp.SetAttributeValue(chromedp.CSS(`#shard-map`), "data-probe", "kept"))
	c.api.set(func(f *fakeAPI) { s := f.dbs["big"].shards[0]; s.Leader = s.Replicas[1]; s.Term++ })
	c.WaitJS(`document.querySelector('#shard-map td[data-shard="0"][data-node="n-2"]').dataset.role === "leader"`)
	require.Equal(t, 1, browsertest.Eval[int](c.Page, `cairnConsole.stats.shardFullRenders`))
	require.Equal(t, 1, browsertest.Eval[int](c.Page, `cairnConsole.stats.shardRowPatches`))
	require.Equal(t, "kept", browsertest.Eval[string](c.Page, `document.getElementById("shard-map").dataset.probe`))
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
