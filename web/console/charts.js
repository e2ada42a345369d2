// Cairn console charts: the last hour of every live node's activity, from
// GET /api/v1/history (each node samples its own metrics; the node serving
// the console gathers the others'). Drawn with uPlot, vendored in the binary.
// Polls only while the Charts tab is shown.
(function () {
  "use strict";

  const CHARTS = [
    { key: "write_points_per_s", title: "Write points/s (brokers)", unit: "pts/s" },
    { key: "write_p99_seconds", title: "Write p99 latency (brokers)", unit: "s" },
    { key: "queries_per_s", title: "Queries/s (brokers)", unit: "q/s" },
    { key: "stored_points_per_s", title: "Points stored/s (shard leaders)", unit: "pts/s" },
    { key: "shard_write_p99_seconds", title: "Shard write p99 (leader + replication)", unit: "s" },
    { key: "leaders", title: "Leaders per node", unit: "" },
    { key: "shards", title: "Shard replicas per node", unit: "" },
    { key: "follower_lag_entries", title: "Follower lag (entries)", unit: "" },
    { key: "follower_lag_seconds", title: "Follower lag (seconds)", unit: "s" },
  ];
  const COLORS = ["#1f57d6", "#d6452f", "#1d8a4b", "#a86a00", "#7a5bc7", "#0f8a9d", "#c2378a", "#5b6b82"];
  const $ = (id) => document.getElementById(id);

  const plots = {}; // chart key -> { u: uPlot, nodes: "id,id" }
  const api = { plots: {}, last: null, polls: 0, error: "" };
  window.cairnCharts = api;
  let timer = 0;

  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  function shown() {
    return location.hash === "#charts" && !document.hidden;
  }

  // align merges every node's time axis into one (uPlot draws series over a
  // shared x), with null where a node has no sample at that second.
  function align(nodes, key) {
    const times = new Set();
    const withData = nodes.filter((n) => (n.series && n.series[key] || []).some((v) => v !== null));
    withData.forEach((n) => n.time.forEach((t) => times.add(t)));
    const xs = Array.from(times).sort((a, b) => a - b);
    const index = new Map(xs.map((t, i) => [t, i]));
    const cols = withData.map((n) => {
      const col = new Array(xs.length).fill(null);
      n.time.forEach((t, i) => { col[index.get(t)] = n.series[key][i]; });
      return col;
    });
    return { nodes: withData.map((n) => n.node_id), data: [xs].concat(cols) };
  }

  function fmt(unit) {
    return (u, v) => v == null ? "-" : (unit === "s" ? (v < 1 ? (v * 1000).toFixed(1) + " ms" : v.toFixed(2) + " s") :
      (Math.abs(v) >= 1000 ? (v / 1000).toFixed(1) + "k" : (+v.toFixed(2)).toString()) + (unit && unit !== "s" ? " " + unit : ""));
  }

  // tick labels stay short (the unit is in the legend and the title).
  function tick(unit, v) {
    if (v == null) return "";
    if (unit === "s") return v === 0 ? "0" : v < 1 ? +(v * 1000).toFixed(1) + "ms" : +v.toFixed(2) + "s";
    return Math.abs(v) >= 1e6 ? +(v / 1e6).toFixed(1) + "M" : Math.abs(v) >= 1000 ? +(v / 1000).toFixed(1) + "k" : String(+v.toFixed(2));
  }

  function draw(c, a, width) {
    const box = $("chart-" + c.key);
    const sig = a.nodes.join(",");
    const points = a.data.slice(1).reduce((n, col) => n + col.filter((v) => v !== null).length, 0);
    box.dataset.points = String(points);
    box.dataset.nodes = String(a.nodes.length);
    const plot = box.querySelector(".plot");
    const empty = box.querySelector(".empty");
    empty.hidden = a.nodes.length > 0;
    let p = plots[c.key];
    if (p && (p.nodes !== sig || p.width !== width)) {
      p.u.destroy();
      p = null;
    }
    if (!a.nodes.length) {
      if (p) p.u.destroy();
      delete plots[c.key];
      delete api.plots[c.key];
      return;
    }
    if (!p) {
      const series = [{}].concat(a.nodes.map((id, i) => ({
        label: id, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true, value: fmt(c.unit),
      })));
      const u = new uPlot({
        width: width, height: 170, series: series, legend: { live: true },
        axes: [{}, { size: 56, values: (u, vals) => vals.map((v) => tick(c.unit, v)) }],
        scales: { y: { range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1] } },
      }, a.data, plot);
      p = { u: u, nodes: sig, width: width };
      plots[c.key] = p;
      api.plots[c.key] = u;
      return;
    }
    p.u.setData(a.data);
  }

  function render(body) {
    const nodes = body.nodes || [];
    const width = Math.max(280, Math.floor(($("charts-grid").clientWidth - 24) / 2) - 20);
    CHARTS.forEach((c) => draw(c, align(nodes, c.key), width));
    const failed = nodes.filter((n) => n.error);
    const interval = nodes.length ? nodes[0].interval_s : 0;
    $("charts-info").textContent = nodes.length + " node" + (nodes.length === 1 ? "" : "s") +
      (interval ? ", one sample every " + interval + " s, last hour" : "") + (body.truncated ? " (more nodes than shown)" : "");
    $("charts-errors").innerHTML = failed.map((n) => "<div>" + esc(n.node_id) + ": " + esc(n.error) + "</div>").join("");
    $("charts-errors").hidden = !failed.length;
  }

  async function poll() {
    clearTimeout(timer);
    if (!shown()) return;
    let period = 5000;
    try {
      const r = await fetch("/api/v1/history", { headers: { Accept: "application/json" }, cache: "no-store" });
      const body = await r.json();
      if (!r.ok) throw new Error((body && body.error && body.error.message) || "HTTP " + r.status);
      api.last = body;
      api.error = "";
      api.polls++;
      render(body);
      const iv = body.nodes && body.nodes.length ? body.nodes[0].interval_s : 5;
      period = Math.min(Math.max(iv, 1), 10) * 1000;
    } catch (e) {
      api.error = e.message;
      $("charts-info").textContent = "history unavailable: " + e.message;
    }
    if (shown()) timer = setTimeout(poll, period);
  }
  api.refresh = poll;

  function build() {
    $("charts-grid").innerHTML = CHARTS.map((c) =>
      '<div class="chart" id="chart-' + c.key + '" data-series="' + c.key + '" data-points="0" data-nodes="0">' +
      "<h3>" + esc(c.title) + '</h3><div class="plot"></div><div class="empty">No node reports this yet.</div></div>').join("");
  }

  build();
  window.addEventListener("hashchange", poll);
  document.addEventListener("visibilitychange", poll);
  let resizeTimer = 0;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (api.last && shown()) render(api.last); }, 200);
  });
  poll();
})();
