// Cairn operator console. It polls the JSON API once a second and rewrites a
// region of the page only when the HTML it would produce has changed, so the
// page never flickers and a 1,000-shard map costs nothing while it is stable.
(function () {
  "use strict";

  const API = "/api/v1";
  const TOKEN_KEY = "cairn.admin_token";
  // The token lives in this tab's sessionStorage only: it is gone when the
  // tab closes and never shared with other tabs. Older consoles kept it in
  // localStorage, where it outlived the session: drop such a copy.
  localStorage.removeItem(TOKEN_KEY);
  const POLL_MS = 1000;
  const $ = (id) => document.getElementById(id);

  const state = {
    health: null, ready: null, master: null, nodes: null, dbs: [], clusters: [],
    shards: null, shardsDb: "", apiError: "", problems: null, operators: null,
  };
  const DB_KEY = "cairn.shard_db";
  // Remembered across reloads so the first poll can fetch its shards at once.
  let selectedDb = localStorage.getItem(DB_KEY) || "";
  function selectDb(name) {
    selectedDb = name;
    if (name) localStorage.setItem(DB_KEY, name); else localStorage.removeItem(DB_KEY);
  }
  const painted = {}; // element id -> HTML last written there
  // Exposed for tests and for operators curious about render cost.
  // lastShard*Ms are cumulative from the start of a render: HTML built,
  // parsed into the DOM, and (RenderMs) styled and laid out.
  const stats = {
    shardRenders: 0, shardFullRenders: 0, shardRowPatches: 0,
    lastShardBuildMs: 0, lastShardParseMs: 0, lastShardRenderMs: 0,
    progressAsks: 0,
  };
  window.cairnConsole = {
    stats: stats,
    refresh: () => poll(),
    // redraw rebuilds the whole shard map from the data in hand and returns
    // its cost in ms: a benchmark hook that leaves the network out.
    redraw: () => { shardMap.reset(); renderShardMap(); return stats.lastShardRenderMs; },
    // progressScheduled tells whether a replica progress question is due:
    // never while the Shard map is not on screen.
    progressScheduled: () => replicaProgress.scheduled(),
  };

  const { esc, byName, drainButton } = CairnShardMap;

  // The API documents elected_at in unix ms and last_updated in unix µs;
  // started_at is not pinned down, so guess the unit from its magnitude.
  function toMs(v) {
    if (!v) return 0;
    if (v > 1e17) return v / 1e6;
    if (v > 1e14) return v / 1e3;
    if (v < 1e11) return v * 1e3;
    return v;
  }

  function ago(ms) {
    if (!ms) return "-";
    const s = Math.max(0, (Date.now() - ms) / 1000);
    if (s < 10) return s.toFixed(1) + "s";
    if (s < 60) return Math.round(s) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + Math.floor(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }

  function put(id, html) {
    if (painted[id] === html) return;
    painted[id] = html;
    $(id).innerHTML = html;
  }

  function setText(id, text) {
    const el = $(id);
    if (el.textContent !== text) el.textContent = text;
  }

  // ---- API access ----

  // getJSON reads with the stored token, if any: with --read-token set,
  // reads need one too (a 401 opens the token box once).
  async function getJSON(path) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const r = await fetch(API + path, { headers: headers, cache: "no-store" });
    if (r.status === 401 && $("token-box").hidden) showTokenBox();
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    return { status: r.status, body: body };
  }

  function errorMessage(r, body) {
    if (body && body.error && body.error.message) return body.error.message;
    return "HTTP " + r.status + " " + r.statusText;
  }

  // mutate sends a state-changing request with the admin token, if one is
  // stored. A 401 opens the token box: the operator enters it and retries.
  async function mutate(method, path, payload) {
    const headers = { Accept: "application/json" };
    if (payload !== undefined) headers["Content-Type"] = "application/json";
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    let r;
    try {
      r = await fetch(API + path, {
        method: method, headers: headers,
        body: payload === undefined ? undefined : JSON.stringify(payload),
      });
    } catch (e) {
      throw new Error("cannot reach the API: " + e.message);
    }
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (r.ok) { poll(); return body; }
    if (r.status === 401) {
      showTokenBox();
      throw new Error("An admin token is required (" + errorMessage(r, body) + "): enter it at the top right, then retry.");
    }
    throw new Error(errorMessage(r, body));
  }

  // ---- polling ----

  let timer = 0, inflight = false, again = false;

  async function poll() {
    if (inflight) { again = true; return; }
    clearTimeout(timer);
    inflight = true;
    try { await refresh(); } finally { inflight = false; }
    if (again) { again = false; poll(); return; }
    if (!document.hidden) timer = setTimeout(poll, POLL_MS);
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) { clearTimeout(timer); replicaProgress.stop(); } else poll();
  });

  const shardsOf = (name) => getJSON("/databases/" + encodeURIComponent(name) + "/shards").then((r) => ({ name: name, r: r }));

  async function refresh() {
    try {
      const wantShards = currentTab() === "shards";
      // The selected database's shards come in the same round trip as the
      // rest; only a database that has just vanished costs a second one.
      const early = wantShards && selectedDb ? shardsOf(selectedDb).catch(() => null) : null;
      const [health, ready, master, nodes, dbs, clusters, problems, ops] = await Promise.all([
        getJSON("/health"), getJSON("/ready"), getJSON("/master"), getJSON("/nodes"),
        getJSON("/databases"), getJSON("/storage-clusters"), getJSON("/problems"), getJSON("/operators"),
      ]);
      state.problems = problems.status === 200 ? problems.body : state.problems;
      // A node that cannot list operators (404) shows none; one whose etcd
      // is away keeps the last list, like the rest of the page.
      state.operators = ops.status === 200 ? ops.body : ops.status === 404 ? null : state.operators;
      state.health = health.body;
      state.ready = ready.body;
      state.master = master.status === 200 ? master.body : null;
      state.nodes = nodes.status === 200 ? nodes.body : state.nodes;
      if (dbs.status === 200) state.dbs = (dbs.body.databases || []).slice().sort((a, b) => byName(a.name, b.name));
      if (clusters.status === 200) state.clusters = clusters.body.storage_clusters || [];
      if (!state.dbs.some((d) => d.name === selectedDb)) selectDb(state.dbs.length ? state.dbs[0].name : "");
      if (wantShards && selectedDb) {
        let s = early ? await early : null;
        if (!s || s.name !== selectedDb) s = await shardsOf(selectedDb);
        if (s.r.status === 200) {
          state.shards = (s.r.body.shards || []).slice().sort((a, b) => a.id - b.id);
          state.shardsDb = s.name;
        }
      }
      state.apiError = "";
    } catch (e) {
      state.apiError = e.message || String(e);
    }
    render();
  }

  // ---- rendering ----

  function render() {
    renderHeader();
    renderProblems();
    renderOperators();
    renderOverview();
    renderDatabases();
    if (currentTab() === "shards") renderShardMap();
  }

  function renderHeader() {
    const ready = state.ready || {};
    let banner = "";
    if (state.apiError) {
      banner = "The console cannot reach the API (" + state.apiError + "); retrying every second.";
    } else if (ready.etcd === "down" || ready.from_backup) {
      banner = "etcd unreachable: showing the local copy of cluster state; metadata changes are refused until it returns";
    }
    setText("banner", banner);
    $("banner").hidden = banner === "";

    const pill = $("etcd-pill");
    const etcd = ready.etcd || "?";
    setText("etcd-pill", "etcd " + etcd);
    pill.className = "pill " + (etcd === "up" ? "up" : etcd === "down" ? "down" : "");
    const h = state.health;
    setText("node-info", h ? "node " + h.node_id + " · " + (h.roles || []).join(", ") : "");
  }

  // Problems the server computed, most severe first; each links to the view
  // where it can be fixed. The tab title carries the count of critical and
  // warning problems, so a background tab still tells.
  function renderProblems() {
    const p = state.problems;
    if (!p) { put("problems", ""); return; }
    const list = p.problems || [];
    const urgent = list.filter((x) => x.severity !== "info").length;
    const title = (urgent ? "(" + urgent + ") " : "") + "Cairn console";
    if (document.title !== title) document.title = title;
    if (!list.length) { put("problems", "<div class=all-ok data-problems=0>No problems: every shard is online and fully in sync.</div>"); return; }
    const label = { critical: "critical", warning: "warning", info: "info" };
    put("problems", "<ul data-problems=" + list.length + ">" + list.map((x) => "<li data-kind='" + esc(x.kind) + "'" +
      (x.node ? " data-node='" + esc(x.node) + "'" : "") + (x.db ? " data-db='" + esc(x.db) + "'" : "") +
      "><span class='sev " + esc(x.severity) + "'>" + esc(label[x.severity] || x.severity) + "</span><span class=msg>" +
      esc(x.message) + "</span>" + (x.link && x.link !== "#" + currentTab() ? "<a href='" + esc(x.link) + "'>fix →</a>" : "") +
      "</li>").join("") + "</ul>");
  }

  // The steps of each operator kind, in the order the master runs them
  // (master/operator.go); an operator's step is the next one it takes.
  const STEPS = {
    move: ["add-replicas", "wait-in-sync", "transfer-leader-off", "remove-replicas", "transfer-leader"],
    "transfer-leader": ["transfer-leader"], failover: ["publish"], offline: ["publish"],
  };
  const MAX_OPS = 200;

  function progress(o) {
    const steps = STEPS[o.kind] || [];
    const n = steps.length, i = steps.indexOf(o.step);
    if (o.step === "done") return { text: "done", value: n, max: n };
    if (o.step === "cancel") return { text: "cancelling", value: 0, max: n || 1 };
    if (i < 0) return { text: o.step || "?", value: 0, max: n || 1 };
    return { text: "step " + (i + 1) + " of " + n + ": " + o.step, value: i, max: n };
  }

  // renderOperators lists the master's operators in flight, one row per
  // shard, with the step each has reached; hidden when there are none.
  function renderOperators() {
    const p = state.operators || {};
    const ops = (p.operators || []).slice().sort((a, b) => byName(a.db, b.db) || a.shard - b.shard);
    const bad = p.unreadable || [];
    $("operators").hidden = !ops.length && !bad.length;
    if (!ops.length && !bad.length) { put("operators", ""); return; }
    const perStep = {};
    ops.forEach((o) => { perStep[o.step] = (perStep[o.step] || 0) + 1; });
    const shown = ops.slice(0, MAX_OPS);
    const rows = shown.map((o) => {
      const pr = progress(o);
      const from = o.kind === "move" ? (o.from || []).join(", ") : o.from_leader || "-";
      const to = o.kind === "move" ? (o.to || []).join(", ") + (o.leader ? " (leader " + o.leader + ")" : "") : o.leader || "-";
      return "<tr data-op='" + esc(o.db) + "/" + esc(o.shard) + "' data-kind='" + esc(o.kind) + "'><td>" + esc(o.db) +
        "</td><td class=num>" + esc(o.shard) + "</td><td>" + esc(o.kind) + "</td><td class=ft>" + esc(from) + " → " + esc(to) +
        "</td><td class=step><progress max=" + pr.max + " value=" + pr.value + "></progress> <span>" + esc(pr.text) +
        "</span></td><td class=num>" + esc(ago(Date.parse(o.created))) + "</td></tr>";
    }).join("");
    put("operators", "<h2>Operators in flight (<span id=op-count>" + ops.length + "</span>)</h2>" +
      (ops.length ? "<div class='muted op-steps'>" + Object.keys(perStep).sort().map((k) => esc(k) + ": " + perStep[k]).join(" · ") +
        "</div><table class=list><tr><th>Database</th><th class=num>Shard</th><th>Kind</th><th>From → to</th><th>Progress</th>" +
        "<th class=num>Age</th></tr>" + rows + "</table>" : "") +
      (ops.length > shown.length ? "<div class=muted>and " + (ops.length - shown.length) + " more</div>" : "") +
      (bad.length ? "<div class='error op-bad'>" + bad.length + " operator record(s) in etcd cannot be read: " +
        esc(bad.slice(0, 5).join("; ")) + (bad.length > 5 ? "; ..." : "") + "</div>" : ""));
  }

  // problemsOf lists the problems of one database.
  function problemsOf(db) {
    return ((state.problems && state.problems.problems) || []).filter((x) => x.db === db);
  }

  function renderOverview() {
    const m = state.master;
    setText("master", m ? m.node_id : "none elected");
    setText("master-sub", m ? "term " + m.term + " · elected " + ago(toMs(m.elected_at)) + " ago · " + m.address : "no master: shard failover is paused");
    const ready = state.ready || {};
    setText("etcd", ready.etcd || "unknown");
    $("etcd").className = "big " + (ready.etcd === "up" ? "ok" : "bad");
    setText("etcd-sub", (ready.ready ? "state loaded" : "not ready") + (ready.from_backup ? " · from local backup" : ""));

    const nodes = state.nodes || { brokers: [], storage: {} };
    const brokers = (nodes.brokers || []).slice().sort((a, b) => byName(a.node_id, b.node_id));
    setText("broker-count", String(brokers.length));
    let rows = brokers.map((b) => "<tr><td>" + esc(b.node_id) + "</td><td>" + esc(b.address) +
      "</td><td class=num>" + ago(toMs(b.started_at)) + "</td></tr>").join("");
    put("brokers", brokers.length ? "<table class=list><tr><th>Node</th><th>Address</th><th class=num>Up for</th></tr>" + rows + "</table>" :
      "<div class=empty>No live brokers.</div>");

    const storage = nodes.storage || {};
    let total = 0, draining = 0;
    rows = "";
    Object.keys(storage).sort(byName).forEach((cluster) => {
      (storage[cluster] || []).slice().sort((a, b) => byName(a.node_id, b.node_id)).forEach((n) => {
        total++;
        if (n.draining) draining++;
        // A listed node is live (its lease holds); last_updated is the
        // record's last real change, not a heartbeat. Replicas: what the
        // assignments give it (the server counts them), else what its record
        // says it hosts.
        const hosted = n.replicas !== undefined ? n.replicas : (n.shards_hosted || 0);
        rows += "<tr><td>" + esc(cluster) + "</td><td>" + esc(n.node_id) + "</td><td>" + esc(n.node_address) +
          nodeLabels(n) + "</td><td>" + esc(n.role) + "</td><td class=num>" + ago(n.last_updated / 1000) +
          "</td><td class=num>" + esc(hosted) + "</td><td class=num>" + esc(n.leads) + "</td><td>" +
          (n.draining ? "<span class='badge drain' data-remaining=" + esc(n.replicas) + ">" +
            (n.replicas ? "draining · " + esc(n.replicas) + " replica" + (n.replicas === 1 ? "" : "s") + " still to move" : "drained") + "</span>" :
            "<span class='badge on'>active</span>") +
          "</td><td>" + drainButton(n.node_id, n.draining) + "</td></tr>";
      });
    });
    // Nodes whose record vanished stay listed, with what they held.
    let down = 0;
    (nodes.down || []).forEach((d) => {
      down++;
      const shards = (d.shards || []).join(", ") + (d.replicas > (d.shards || []).length ? ", ..." : "");
      rows += "<tr class=down data-down='" + esc(d.node_id) + "'><td>" + esc(d.cluster) + "</td><td>" + esc(d.node_id) + "</td><td>" +
        esc(d.node_address || "-") + "</td><td>storage</td><td class='num bad'>-</td><td class=num title='" + esc(shards) + "'>" +
        esc(d.replicas) + "</td><td class=num>0</td><td><span class='badge down'>down" +
        (d.since ? " since " + esc(new Date(d.since).toLocaleTimeString()) + " (" + ago(d.since) + ")" : "") +
        "</span></td><td class=muted>" + (shards ? "last shards: " + esc(shards.length > 60 ? shards.slice(0, 60) + "…" : shards) : "") + "</td></tr>";
    });
    setText("storage-count", String(total));
    setText("storage-sub", Object.keys(storage).length + " cluster(s)" + (draining ? " · " + draining + " draining" : "") +
      (down ? " · " + down + " down" : ""));
    put("storage-nodes", total + down ? "<table class=list><tr><th>Cluster</th><th>Node</th><th>Address</th><th>Role</th>" +
      "<th class=num>Last change</th><th class=num>Replicas</th><th class=num>Leads</th><th>State</th><th></th></tr>" + rows + "</table>" :
      "<div class=empty>No live storage nodes.</div>");

    rows = state.clusters.slice().sort((a, b) => byName(a.name, b.name)).map((c) => "<tr><td>" + esc(c.name) + "</td><td>" +
      esc((c.etcd_endpoints || []).length ? c.etcd_endpoints.join(", ") : "same etcd") + "</td><td>" +
      esc(c.namespace || "(cluster default)") + "</td><td class=num>" + esc(c.live_nodes) + "</td><td class=num>" +
      esc(c.shards) + "</td><td>" + esc(c.failure_domain || "node") + "</td></tr>").join("");
    put("clusters", state.clusters.length ? "<table class=list><tr><th>Name</th><th>etcd</th><th>Namespace</th>" +
      "<th class=num>Live nodes</th><th class=num>Shards</th><th>Replicas spread by</th></tr>" + rows + "</table>" :
      "<div class=empty>No storage clusters.</div>");
  }

  // nodeLabels shows a storage node's labels (its failure domains) and a
  // weight other than 1 under its address.
  function nodeLabels(n) {
    const parts = Object.keys(n.labels || {}).sort(byName).map((k) => k + "=" + n.labels[k]);
    if (n.weight > 1) parts.push("weight " + n.weight);
    return parts.length ? "<div class='muted labels'>" + esc(parts.join(" · ")) + "</div>" : "";
  }

  // health sums up a database's problems in a few words.
  function health(db) {
    if (!state.problems) return "<td class=health>?</td>";
    const ps = problemsOf(db);
    if (!ps.length) return "<td class='health ok' data-health=ok>healthy</td>";
    const words = { shards_offline: "offline", under_replicated: "under-replicated", followers_lagging: "catching up" };
    const bad = ps.some((x) => x.severity === "critical");
    return "<td class='health " + (bad ? "bad" : "warn") + "' data-health=" + (bad ? "critical" : "warning") + " title='" +
      esc(ps.map((x) => x.message).join("\n")) + "'>" + ps.map((x) => esc(x.count) + " " + esc(words[x.kind] || x.kind)).join(" · ") + "</td>";
  }

  function renderDatabases() {
    const rows = state.dbs.map((d) => "<tr data-db='" + esc(d.name) + "'><td><a href='#shards/" + esc(encodeURIComponent(d.name)) + "' data-show-db='" +
      esc(d.name) + "'>" + esc(d.name) + "</a></td>" + health(d.name) + "<td>" + esc(d.storage_cluster) + "</td><td class=num>" +
      esc(d.num_shards) + "</td><td class=num>" + esc(d.replica_factor) +
      "</td><td><button type=button class=delete data-db='" + esc(d.name) + "'>delete</button></td></tr>").join("");
    put("db-list", state.dbs.length ? "<table class=list><tr><th>Name</th><th>Health</th><th>Storage cluster</th><th class=num>Shards</th>" +
      "<th class=num>Replica factor</th><th></th></tr>" + rows + "</table>" : "<div class=empty>No databases yet.</div>");

    const sel = $("db-form").elements.storage_cluster;
    const names = state.clusters.length ? state.clusters.map((c) => c.name).sort(byName) : ["default"];
    // Keep the operator's choice across refreshes; start on "default",
    // the cluster standalone nodes create, when it exists.
    const keep = painted.clusterOpts ? sel.value : "default";
    const opts = names.map((n) => "<option>" + esc(n) + "</option>").join("");
    if (painted.clusterOpts !== opts) {
      painted.clusterOpts = opts;
      sel.innerHTML = opts;
      if (names.indexOf(keep) >= 0) sel.value = keep;
    }

    const dbSel = $("shard-db");
    const dbOpts = state.dbs.map((d) => "<option>" + esc(d.name) + "</option>").join("");
    if (painted.dbOpts !== dbOpts) { painted.dbOpts = dbOpts; dbSel.innerHTML = dbOpts; }
    if (dbSel.value !== selectedDb) dbSel.value = selectedDb;
  }

  const shardMap = CairnShardMap.create($("shard-map"), stats);

  // The replica progress under the map: asked of the storage nodes for the
  // selected database only, while the Shard map tab is on screen.
  const replicaProgress = CairnProgress.create({
    getJSON: getJSON, stats: stats,
    db: () => selectedDb,
    open: () => currentTab() === "shards" && !document.hidden,
    live: (name) => {
      const db = state.dbs.find((d) => d.name === name);
      const nodes = db ? ((state.nodes && state.nodes.storage) || {})[db.storage_cluster] || [] : [];
      return new Set(nodes.map((n) => n.node_id));
    },
  });

  function renderShardMap() {
    replicaProgress.sync();
    replicaProgress.render();
    const db = state.dbs.find((d) => d.name === selectedDb);
    if (!db || state.shardsDb !== selectedDb || !state.shards) {
      shardMap.placeholder(db ? "Loading shards..." : "No database selected.");
      setText("shard-summary", "");
      return;
    }
    const live = ((state.nodes && state.nodes.storage) || {})[db.storage_cluster] || [];
    setText("shard-summary", shardMap.render(db, state.shards, live));
  }

  // ---- navigation ----

  // Routes are #tab or #tab/<database> (problems link to #shards/<db>).
  function currentTab() {
    const t = location.hash.replace("#", "").split("/")[0];
    return t === "databases" || t === "shards" || t === "charts" ? t : "overview";
  }

  function showTab() {
    const tab = currentTab();
    const db = decodeURIComponent(location.hash.split("/").slice(1).join("/"));
    if (db && db !== selectedDb) selectDb(db);
    document.querySelectorAll("[data-section]").forEach((s) => { s.hidden = s.dataset.section !== tab; });
    document.querySelectorAll("#tabs a").forEach((a) => a.classList.toggle("active", a.dataset.tab === tab));
    if (tab === "shards") renderShardMap(); else replicaProgress.stop();
    poll();
  }
  window.addEventListener("hashchange", showTab);

  // ---- notices and token ----

  let noticeTimer = 0;
  function notice(msg, isError) {
    const el = $("notice");
    el.textContent = msg;
    el.className = "notice" + (isError ? " err" : "");
    el.hidden = false;
    clearTimeout(noticeTimer);
    if (!isError) noticeTimer = setTimeout(() => { el.hidden = true; }, 6000);
  }
  $("notice").addEventListener("click", () => { $("notice").hidden = true; });

  function showTokenBox() {
    $("token-box").hidden = false;
    $("token-show").hidden = true;
    $("token").focus();
  }
  $("token-show").addEventListener("click", showTokenBox);
  $("token-box").addEventListener("submit", (e) => {
    e.preventDefault();
    const v = $("token").value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v); else sessionStorage.removeItem(TOKEN_KEY);
    $("token").value = "";
    $("token-box").hidden = true;
    $("token-show").hidden = false;
    notice(v ? "Token saved in this browser; retry the action." : "Token cleared.");
    poll();
  });

  // ---- actions ----

  $("db-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = e.target.elements;
    const err = $("db-error");
    const body = {
      name: f.name.value.trim(), storage_cluster: f.storage_cluster.value,
      num_shards: parseInt(f.num_shards.value, 10), replica_factor: parseInt(f.replica_factor.value, 10),
    };
    $("db-create").disabled = true;
    try {
      await mutate("POST", "/databases", body);
      err.hidden = true;
      f.name.value = "";
      selectDb(body.name);
      notice("Database " + body.name + " created: " + body.num_shards + " shards × " + body.replica_factor + " replicas.");
    } catch (ex) {
      err.textContent = ex.message;
      err.hidden = false;
    } finally {
      $("db-create").disabled = false;
    }
  });

  let deleting = "";
  $("db-list").addEventListener("click", (e) => {
    const show = e.target.closest("[data-show-db]");
    if (show) { selectDb(show.dataset.showDb); return; }
    const del = e.target.closest("button.delete");
    if (!del) return;
    deleting = del.dataset.db;
    $("db-delete-target").textContent = deleting;
    $("db-delete-name").value = "";
    $("db-delete-go").disabled = true;
    $("db-delete").hidden = false;
    $("db-delete-name").focus();
  });
  $("db-delete-name").addEventListener("input", () => {
    $("db-delete-go").disabled = $("db-delete-name").value !== deleting;
  });
  $("db-delete-cancel").addEventListener("click", () => { $("db-delete").hidden = true; deleting = ""; });
  $("db-delete-go").addEventListener("click", async () => {
    if ($("db-delete-name").value !== deleting) return;
    const name = deleting;
    try {
      await mutate("DELETE", "/databases/" + encodeURIComponent(name));
      $("db-delete").hidden = true;
      deleting = "";
      notice("Database " + name + " deleted.");
    } catch (ex) {
      notice("Delete " + name + ": " + ex.message, true);
    }
  });

  async function drain(btn) {
    const id = btn.dataset.node;
    const undo = btn.classList.contains("undrain");
    btn.disabled = true;
    try {
      await mutate("POST", "/nodes/" + encodeURIComponent(id) + (undo ? "/undrain" : "/drain"));
      notice(undo ? "Node " + id + " accepts replicas again." : "Draining " + id + ": its replicas and leaderships are moving to other nodes.");
    } catch (ex) {
      btn.disabled = false;
      notice((undo ? "Undrain " : "Drain ") + id + ": " + ex.message, true);
    }
  }
  $("storage-nodes").addEventListener("click", (e) => {
    const b = e.target.closest("button.drain, button.undrain");
    if (b) drain(b);
  });

  // ---- rebalance: dry run first, then the operator confirms ----

  function planText(plan) {
    const moves = plan.moves || [];
    const leaders = moves.filter((m) => m.kind === "leader").length;
    return { replicas: moves.length - leaders, leaders: leaders, moves: moves };
  }

  function moveLine(m) {
    const where = esc(m.db) + " shard " + esc(m.shard);
    if (m.kind === "leader") return "leader of " + where + ": " + esc(m.from || "none") + " → " + esc(m.to);
    if (m.kind === "add") return "add a replica of " + where + " on " + esc(m.to);
    if (m.kind === "remove") return "remove the replica of " + where + " from " + esc(m.from);
    return esc(m.kind) + " " + where;
  }

  $("rebalance").addEventListener("click", async () => {
    const box = $("rebalance-plan");
    $("rebalance").disabled = true;
    try {
      const plan = await mutate("POST", "/rebalance?dry_run=true");
      const t = planText(plan);
      box.dataset.moves = String(t.moves.length);
      if (!t.moves.length) {
        box.innerHTML = "<b>Nothing to do:</b> replicas and leaders are already balanced. <button type=button id=rebalance-cancel>Close</button>";
      } else {
        const shown = t.moves.slice(0, 200);
        box.innerHTML = "<div><b>Rebalance plan (dry run):</b> <span id=plan-replicas>" + t.replicas + "</span> replica move(s), <span id=plan-leaders>" +
          t.leaders + "</span> leader transfer(s)" + (plan.lower_bound !== undefined ? " · at least " + esc(plan.lower_bound) + " relocations needed" : "") +
          ". Replicas are copied before old ones are dropped; leaders move only to in-sync replicas.</div><ol>" +
          shown.map((m) => "<li data-kind='" + esc(m.kind) + "'>" + moveLine(m) + "</li>").join("") + "</ol>" +
          (t.moves.length > shown.length ? "<div class=muted>and " + (t.moves.length - shown.length) + " more</div>" : "") +
          "<button type=button id=rebalance-go class=primary>Run this plan</button> <button type=button id=rebalance-cancel>Cancel</button>";
      }
      box.hidden = false;
    } catch (ex) {
      notice("Rebalance dry run: " + ex.message, true);
    } finally {
      $("rebalance").disabled = false;
    }
  });
  $("rebalance-plan").addEventListener("click", async (e) => {
    const box = $("rebalance-plan");
    if (e.target.id === "rebalance-cancel") { box.hidden = true; return; }
    if (e.target.id !== "rebalance-go") return;
    e.target.disabled = true;
    try {
      const plan = await mutate("POST", "/rebalance");
      const t = planText(plan);
      box.hidden = true;
      const shown = Number(box.dataset.moves || "0");
      notice("Rebalance started: " + t.replicas + " replica move(s) and " + t.leaders + " leader transfer(s)" +
        (t.moves.length !== shown ? " (the cluster changed since the dry run, which showed " + shown + " steps)" : "") +
        "; the master carries them out step by step.");
    } catch (ex) {
      e.target.disabled = false;
      notice("Rebalance: " + ex.message, true);
    }
  });

  $("shard-db").addEventListener("change", (e) => {
    selectDb(e.target.value);
    history.replaceState(null, "", "#shards/" + encodeURIComponent(e.target.value));
    $("shard-action").hidden = true;
    poll();
  });

  $("shard-map").addEventListener("click", (e) => {
    const b = e.target.closest("button.drain, button.undrain");
    if (b) { drain(b); return; }
    const cell = e.target.closest("td[data-role=follower]");
    if (!cell) return;
    const s = (state.shards || []).find((x) => String(x.id) === cell.dataset.shard);
    const box = $("shard-action");
    box.innerHTML = "Make <b>" + esc(cell.dataset.node) + "</b> leader of shard <b>" + esc(cell.dataset.shard) +
      "</b>" + (s ? " (now " + esc(s.leader || "none") + ", term " + esc(s.term) + ")" : "") +
      "? <button type=button id=shard-leader-go class=primary>Make leader</button>" +
      " <button type=button id=shard-leader-cancel>Cancel</button>";
    box.dataset.shard = cell.dataset.shard;
    box.dataset.node = cell.dataset.node;
    box.hidden = false;
  });
  $("shard-action").addEventListener("click", async (e) => {
    const box = $("shard-action");
    if (e.target.id === "shard-leader-cancel") { box.hidden = true; return; }
    if (e.target.id !== "shard-leader-go") return;
    const shard = box.dataset.shard, node = box.dataset.node, db = selectedDb;
    e.target.disabled = true;
    try {
      await mutate("POST", "/databases/" + encodeURIComponent(db) + "/shards/" + encodeURIComponent(shard) + "/leader", { node_id: node });
      box.hidden = true;
      notice("Leader of " + db + " shard " + shard + " is moving to " + node + ".");
    } catch (ex) {
      e.target.disabled = false;
      notice("Leader transfer: " + ex.message, true);
    }
  });

  showTab();
})();
