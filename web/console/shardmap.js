// Shard map view: one row per shard, one column per storage node of the
// database's cluster (Shardz's P x N picture). It is the one large region of
// the console, so it is drawn from a single HTML string and, while its shape
// holds, refreshed by replacing only the rows whose HTML changed.
window.CairnShardMap = (function () {
  "use strict";

  const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const esc = (s) => String(s == null ? "" : s).replace(/[&<>"']/g, (c) => ESC[c]);
  const byName = (a, b) => String(a).localeCompare(String(b), undefined, { numeric: true });

  // Column widths in px; they must match console.css.
  const SID_W = 52, NODE_W = 68, INFO_W = 160;

  function drainButton(id, draining) {
    return draining ? "<button type=button class=undrain data-node='" + esc(id) + "'>undrain</button>" :
      "<button type=button class=drain data-node='" + esc(id) + "'>drain</button>";
  }

  // Live nodes first; a replica on a node that is not live still gets a
  // column, marked down, so a lost replica is visible rather than dropped.
  function columns(live, shards) {
    const cols = live.map((n) => ({ id: n.node_id, draining: !!n.draining, gone: false }));
    const seen = new Set(cols.map((c) => c.id));
    shards.forEach((s) => (s.replicas || []).forEach((r) => {
      if (!seen.has(r)) { seen.add(r); cols.push({ id: r, draining: false, gone: true }); }
    }));
    return cols.sort((a, b) => byName(a.id, b.id));
  }

  function header(cols) {
    let head = "<thead><tr><th class=sid>shard</th>";
    for (const c of cols) {
      head += "<th data-node='" + esc(c.id) + "' class='" + (c.draining ? "dr" : "") + (c.gone ? " gone" : "") +
        "' title='" + esc(c.id) + (c.draining ? " (draining)" : "") + (c.gone ? " (not live)" : "") +
        "'><span class=nid>" + esc(c.id) + "</span>" +
        (c.gone ? "<span class='badge down'>down</span>" : drainButton(c.id, c.draining)) + "</th>";
    }
    return head + "<th class=info>state</th></tr></thead>";
  }

  function row(s, cols) {
    const replicas = new Set(s.replicas || []);
    const isr = new Set(s.isr || []);
    const offline = s.status === "offline";
    let html = "<tr" + (offline ? " class=offline" : "") + "><th class=sid>" + s.id + "</th>";
    for (const c of cols) {
      let role = "none", label = "";
      if (replicas.has(c.id)) {
        // A replica on a node that is not live serves nothing, whatever the
        // (stale) leader or in-sync records still say.
        if (c.gone) { role = "down"; label = "×"; }
        // An offline shard has no serving leader, whatever the record says.
        else if (c.id === s.leader && !offline) { role = "leader"; label = "L"; }
        else if (isr.has(c.id)) { role = "follower"; label = "F"; }
        else { role = "stale"; label = "F"; }
      }
      html += "<td data-shard=" + s.id + " data-node='" + esc(c.id) + "' data-role=" + role +
        (c.draining ? " class=dr>" : ">") + label + "</td>";
    }
    const info = offline ? "offline" + (s.reason ? ": " + s.reason : "") : "term " + s.term;
    return html + "<td class=info>" + esc(info) + "</td></tr>";
  }

  function summary(db, shards, cols) {
    const gone = new Set(cols.filter((c) => c.gone).map((c) => c.id));
    let offline = 0, stale = 0, down = 0;
    for (const s of shards) {
      if (s.status === "offline") offline++;
      const isr = new Set(s.isr || []);
      for (const r of s.replicas || []) {
        if (gone.has(r)) down++;
        else if (!isr.has(r)) stale++;
      }
    }
    return shards.length + " shards × " + cols.length + " nodes · replica factor " + db.replica_factor +
      " · " + offline + " offline · " + stale + " out-of-sync replicas" + (down ? " · " + down + " replicas on down nodes" : "");
  }

  // create binds a view to a <table>. stats receives render counters and
  // timings (cumulative ms from the start of a render: HTML built, parsed,
  // then styled and laid out).
  function create(table, stats) {
    let key = "", rows = [];
    return {
      reset() { key = ""; rows = []; },
      placeholder(text) {
        if (key === "placeholder:" + text) return;
        key = "placeholder:" + text; rows = [];
        table.style.width = "";
        table.innerHTML = "<tbody><tr><td class=info>" + esc(text) + "</td></tr></tbody>";
      },
      // render draws shards (sorted by id) over the live nodes of the
      // database's cluster and returns a one-line summary.
      render(db, shards, live) {
        const t0 = performance.now();
        const cols = columns(live, shards);
        const next = db.name + "|" + cols.map((c) => c.id + (c.draining ? "+d" : "") + (c.gone ? "+g" : "")).join(",") +
          "|" + shards.map((s) => s.id).join(",");
        const html = shards.map((s) => row(s, cols));
        stats.lastShardBuildMs = performance.now() - t0;
        if (next !== key) {
          // Flex rows do not stretch to the widest row as table columns
          // would, so the table gets its full width explicitly.
          table.style.width = (SID_W + cols.length * NODE_W + INFO_W) + "px";
          table.innerHTML = header(cols) + "<tbody>" + html.join("") + "</tbody>";
          key = next;
          stats.lastShardParseMs = performance.now() - t0;
          stats.shardFullRenders++;
        } else {
          const body = table.tBodies[0];
          for (let i = 0; i < html.length; i++) {
            if (html[i] !== rows[i]) { body.rows[i].outerHTML = html[i]; stats.shardRowPatches++; }
          }
        }
        rows = html;
        void table.offsetHeight; // include style and layout in the measured cost
        stats.lastShardRenderMs = performance.now() - t0;
        stats.shardRenders++;
        return summary(db, shards, cols);
      },
    };
  }

  return { create: create, esc: esc, byName: byName, drainButton: drainButton };
})();
