// Replica progress, under the shard map: every replica's last txn id and
// terms, and how far each follower is behind its leader. The broker asks the
// storage nodes when the console asks (GET .../shards?progress=true: one
// request per node, in parallel, 2 s each; nothing is kept in etcd), so the
// console asks only for the database on screen, only while the Shard map tab
// is open and the page visible: on the Refresh button, and every 5 s while
// "auto" is ticked. Polling every database in the background would cost a
// cluster of 1,000 databases 1,000 fan-outs a round.
window.CairnProgress = (function () {
  "use strict";

  const { esc, byName } = CairnShardMap;
  const EVERY_MS = 5000;
  const MAX_ROWS = 2000; // a 1,000-shard database at RF 2; filter for the rest

  // replicaRows flattens shards into one row per replica, the leader first.
  // lag is the leader's last txn id minus the replica's: null when either
  // did not answer or the shard has no serving leader.
  function replicaRows(shards, live) {
    const out = [];
    for (const s of shards) {
      const prog = s.progress || {};
      const silent = new Set(s.unanswered || []);
      const isr = new Set(s.isr || []);
      const offline = s.status === "offline";
      const lead = !offline && s.leader && !silent.has(s.leader) ? prog[s.leader] : undefined;
      const reps = (s.replicas || []).slice().sort((a, b) => (b === s.leader) - (a === s.leader) || byName(a, b));
      for (const n of reps) {
        const p = silent.has(n) ? undefined : prog[n];
        const role = offline ? "offline" : n === s.leader ? "leader" : isr.has(n) ? "follower" : "out of sync";
        let state, lag = null;
        if (!p) state = live.has(n) ? "no-answer" : "down";
        else if (offline || !s.leader) state = "no-leader";
        else if (!lead) state = "unknown";
        else {
          lag = lead.last_txn_id - p.last_txn_id;
          state = lag > 0 ? "behind" : lag < 0 ? "ahead" : "in-step";
        }
        out.push({ shard: s.id, node: n, role: role, p: p, lag: lag, state: state });
      }
    }
    return out;
  }

  const STATE_TEXT = {
    "in-step": "in step", behind: "behind", ahead: "ahead of the leader", unknown: "leader did not answer",
    "no-leader": "no leader", "no-answer": "no answer in 2 s", down: "node down",
  };
  const STATE_CLASS = {
    "in-step": "on", behind: "lag", ahead: "lag", unknown: "", "no-leader": "down", "no-answer": "off", down: "down",
  };
  const STATE_TITLE = {
    "no-answer": "its node is live but did not answer within 2 s: unreachable, too slow, or not serving this replica yet",
    down: "its node is not live", "no-leader": "the shard is offline", ahead: "it holds entries its leader does not",
  };

  function lagText(r) {
    if (r.lag === null) return "-";
    if (r.role === "leader") return "—";
    return r.lag < 0 ? "+" + (-r.lag) : String(r.lag);
  }

  function rowHTML(r) {
    const p = r.p;
    const num = (v) => "<td class=num>" + (p ? esc(v === undefined ? "-" : v) : "-") + "</td>";
    return "<tr data-shard=" + esc(r.shard) + " data-node='" + esc(r.node) + "' data-state=" + r.state +
      (p ? " data-txn=" + esc(p.last_txn_id) : "") + (r.lag !== null ? " data-lag=" + r.lag : "") +
      "><td class=num>" + esc(r.shard) + "</td><td>" + esc(r.node) + "</td><td>" + esc(r.role) + "</td>" +
      num(p && p.last_txn_id) + num(p && p.last_term) + num(p && p.term) + num(p && (p.seen_term || "-")) +
      "<td class='num lag'>" + esc(lagText(r)) + "</td><td><span class='badge " + STATE_CLASS[r.state] + "'" +
      (STATE_TITLE[r.state] ? " title='" + esc(STATE_TITLE[r.state]) + "'" : "") + ">" +
      esc(STATE_TEXT[r.state]) + "</span></td></tr>";
  }

  function clock(ms) { return new Date(ms).toLocaleTimeString(); }

  // create binds the panel to the page. deps: getJSON(path) -> {status, body}
  // (throws when the API is unreachable), db() the database on screen,
  // open() whether the view is on screen, live(db) the ids of its cluster's
  // live storage nodes, and stats for test counters.
  function create(deps) {
    const $ = (id) => document.getElementById(id);
    let data = null; // {db, shards, at, took}
    let error = "", painted = "", timer = 0, inflight = null;
    let askedDb = "", askedAt = 0; // the last question, answered or not
    const memo = { data: null, key: "" };

    function stop() { clearTimeout(timer); timer = 0; }

    function schedule() {
      stop();
      if ($("progress-auto").checked && deps.open() && deps.db()) timer = setTimeout(ask, EVERY_MS);
    }

    // ask fetches the progress of the database on screen now, unless a
    // question is already out (its answer comes soon enough).
    function ask() {
      stop();
      const db = deps.db();
      if (!db) { data = null; error = ""; askedDb = ""; }
      if (!deps.open() || !db) { render(); return Promise.resolve(); }
      if (inflight) return inflight;
      if (askedDb !== db) { data = null; error = ""; }
      askedDb = db;
      deps.stats.progressAsks++;
      const t0 = performance.now();
      $("progress-refresh").disabled = true;
      const q = deps.getJSON("/databases/" + encodeURIComponent(db) + "/shards?progress=true").then((r) => {
        if (r.status === 200 && r.body && Array.isArray(r.body.shards)) {
          data = { db: db, shards: r.body.shards.slice().sort((a, b) => a.id - b.id), at: Date.now(), took: performance.now() - t0 };
          error = "";
        } else {
          error = (r.body && r.body.error && r.body.error.message) || "HTTP " + r.status;
        }
      }).catch((e) => {
        error = "cannot reach the API: " + (e.message || String(e));
      }).finally(() => {
        inflight = null;
        askedAt = Date.now();
        $("progress-refresh").disabled = false;
        // The operator may have picked another database meanwhile.
        if (data && data.db !== deps.db()) data = null;
        render();
        schedule();
      });
      inflight = q;
      render();
      return q;
    }

    // sync follows the view: ask at once when it opens on a database not
    // asked yet, keep the auto refresh going while it stays open, stop when
    // it closes. Cheap: the console calls it on every render.
    function sync() {
      if (!deps.open()) { stop(); return; }
      if (deps.db() !== askedDb) { ask(); return; }
      if ($("progress-auto").checked && !timer && !inflight) {
        const since = Date.now() - askedAt;
        if (since >= EVERY_MS) ask(); else timer = setTimeout(ask, EVERY_MS - since);
      }
    }

    function render() {
      const db = deps.db();
      const err = $("progress-error");
      const errText = error ? "Replica progress of " + db + " could not be read: " + error +
        (data ? " (showing the answer of " + clock(data.at) + ")" : "") : "";
      if (err.textContent !== errText) err.textContent = errText;
      err.hidden = !error;
      if (!data) {
        const empty = error ? "" : "<div class=empty>" + (inflight ? "Asking the storage nodes..." : "Not asked yet.") + "</div>";
        if (painted !== empty) { painted = empty; $("progress").innerHTML = empty; }
        $("progress-summary").textContent = "";
        return;
      }
      const live = deps.live(data.db);
      const onlyBad = $("progress-filter").value === "behind";
      // The console renders every second; the table is rebuilt only when
      // an answer, the filter or the set of live nodes changed.
      const key = [...live].sort().join(",") + "|" + onlyBad;
      if (memo.data === data && memo.key === key) return;
      memo.data = data; memo.key = key;
      const rows = replicaRows(data.shards, live);
      const shown = onlyBad ? rows.filter((r) => r.state !== "in-step") : rows;
      let behind = 0, maxLag = 0, silent = 0, down = 0;
      for (const r of rows) {
        if (r.state === "behind") { behind++; maxLag = Math.max(maxLag, r.lag); }
        if (r.state === "no-answer") silent++;
        if (r.state === "down") down++;
      }
      const summary = "asked at " + clock(data.at) + " in " + Math.round(data.took) + " ms · " + rows.length + " replicas · " +
        behind + " behind" + (behind ? " (max lag " + maxLag + ")" : "") + " · " + silent + " not answering" +
        (down ? " · " + down + " on down nodes" : "");
      if ($("progress-summary").textContent !== summary) $("progress-summary").textContent = summary;
      const html = shown.length ? "<table class='list progress'><tr><th class=num>Shard</th><th>Replica</th><th>Role</th>" +
        "<th class=num>Last txn id</th><th class=num title='term of the last entry in its log'>Log term</th>" +
        "<th class=num title='the term it serves at'>Term</th><th class=num title='the highest term it accepted'>Seen term</th>" +
        "<th class=num title=\"leader's last txn id minus this replica's\">Lag</th><th>State</th></tr>" +
        shown.slice(0, MAX_ROWS).map(rowHTML).join("") + "</table>" +
        (shown.length > MAX_ROWS ? "<div class=muted>and " + (shown.length - MAX_ROWS) + " more replicas" +
          (onlyBad ? "" : " (show only those behind or not answering)") + "</div>" : "") :
        "<div class=empty>" + (rows.length ? "Every replica is in step with its leader." : "No replicas.") + "</div>";
      if (painted !== html) { painted = html; $("progress").innerHTML = html; }
    }

    $("progress-refresh").addEventListener("click", () => { ask(); });
    $("progress-auto").addEventListener("change", () => { if ($("progress-auto").checked) sync(); else stop(); });
    $("progress-filter").addEventListener("change", render);

    return { ask: ask, sync: sync, stop: stop, render: render, scheduled: () => timer !== 0 };
  }

  return { create: create, replicaRows: replicaRows };
})();
