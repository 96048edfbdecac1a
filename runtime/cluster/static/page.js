// The live cluster page. It polls the node's read-only management routes
// and derives rates and events from successive answers, so the node does
// no work for it beyond answering those routes. Everything received is
// inserted as text, never as markup.
"use strict";

(() => {
  // States the page has a colour for; any other state string, and a
  // member with "catching_up": true, still gets a badge of its own.
  const STATE_CLASS = {
    alive: "alive", suspect: "suspect", leaving: "leaving", dead: "dead", left: "left",
    catching_up: "catching", "catching-up": "catching",
  };
  const MAX_EVENTS = 100;
  const MAX_OPS = 100;
  const HISTORY = 120; // samples in the sparklines
  const TIMEOUT_MS = 5000;

  // Routes relative to the page (…/cluster/page/), so the page also works
  // when the management handler is mounted under a prefix.
  const ROUTES = {
    members: "../members",
    metrics: "../../metrics",
    ops: "../../ops",
    ready: "../../health/ready",
  };

  const $ = (id) => document.getElementById(id);

  // The token comes from the fragment (never sent to the server by the
  // browser), is kept for this tab only, and is removed from the address bar.
  const hash = new URLSearchParams(location.hash.slice(1));
  let token = hash.get("token") || sessionStorage.getItem("ffgen-token") || "";
  if (hash.has("token")) {
    sessionStorage.setItem("ffgen-token", token);
    hash.delete("token");
    const rest = hash.toString();
    history.replaceState(null, "", location.pathname + location.search + (rest ? "#" + rest : ""));
  }
  const everyMs = Math.max(250, (Number(hash.get("every")) || 1) * 1000);

  class AuthError extends Error {}

  let members = null; // name → member, from the last answer
  let counters = null; // the last metrics snapshot
  let history_ = []; // {ops, failovers, errors} per poll, rates per second
  const events = [];
  let clockSkew = 0; // node clock minus browser clock, from the Date header
  let unreachableSince = null;
  let waitingForToken = false;

  async function get(route, asText) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    try {
      const headers = token ? { Authorization: "Bearer " + token } : {};
      const r = await fetch(route, { headers, signal: ctl.signal, cache: "no-store" });
      if (r.status === 401) throw new AuthError("the node wants a bearer token");
      const date = Date.parse(r.headers.get("Date") || "");
      if (!Number.isNaN(date)) clockSkew = date - Date.now();
      // A node that is not ready answers 503 with its reason: data, not failure.
      if (!r.ok && !(route === ROUTES.ready && r.status === 503)) {
        throw new Error(route + ": HTTP " + r.status);
      }
      return asText ? await r.text() : await r.json();
    } finally {
      clearTimeout(timer);
    }
  }

  async function tick() {
    const started = Date.now();
    try {
      const [ms, metrics, ops, ready] = await Promise.all([
        get(ROUTES.members), get(ROUTES.metrics, true), get(ROUTES.ops), get(ROUTES.ready),
      ]);
      if (unreachableSince !== null) {
        addEvent("recovered", "reachable", "this node answers again");
        unreachableSince = null;
      }
      update(ms, parseMetrics(metrics), ops, ready);
      $("status").textContent = "updated " + clock(new Date());
      $("status").className = "muted";
      $("auth").hidden = true;
    } catch (e) {
      if (e instanceof AuthError) {
        askToken(token ? "the node refused this token" : "");
        return; // resumes when a token is entered
      }
      if (unreachableSince === null) {
        unreachableSince = new Date();
        addEvent("node", "unreachable", "this node does not answer: " + e.message);
      }
      $("status").textContent = "cannot reach this node since " + clock(unreachableSince) + "; retrying";
      $("status").className = "error";
      document.body.classList.add("stale");
    }
    setTimeout(tick, Math.max(0, everyMs - (Date.now() - started)));
  }

  function askToken(msg) {
    waitingForToken = true;
    $("auth").hidden = false;
    $("auth-msg").textContent = msg;
    $("status").textContent = "waiting for a token";
    $("token").focus();
  }

  $("auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token").value.trim();
    $("token").value = "";
    sessionStorage.setItem("ffgen-token", token);
    if (waitingForToken) {
      waitingForToken = false;
      tick();
    }
  });

  // --- metrics -------------------------------------------------------------

  // parseMetrics reads the Prometheus text format into per-method counters.
  function parseMetrics(text) {
    const snap = { at: Date.now(), methods: new Map() };
    const method = (l) => {
      const key = l.service + "." + l.method;
      let m = snap.methods.get(key);
      if (!m) {
        m = { ok: 0, err: 0, attempts: 0, failovers: {}, clientInFlight: 0, serverInFlight: 0 };
        snap.methods.set(key, m);
      }
      return m;
    };
    for (const line of text.split("\n")) {
      if (line === "" || line[0] === "#") continue;
      const s = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
      if (!s) continue;
      const labels = {};
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
      let l;
      while ((l = re.exec(s[2] || "")) !== null) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      }
      const v = Number(s[3]);
      switch (s[1]) {
        case "ffgen_operations_total":
          if (labels.outcome === "ok") method(labels).ok = v;
          else method(labels).err = v;
          break;
        case "ffgen_attempts_started_total":
          method(labels).attempts = v;
          break;
        case "ffgen_failovers_total":
          method(labels).failovers[labels.reason] = v;
          break;
        case "ffgen_client_attempts_in_flight":
          method(labels).clientInFlight = v;
          break;
        case "ffgen_server_attempts_in_flight":
          method(labels).serverInFlight = v;
          break;
      }
    }
    return snap;
  }

  const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);

  // rates compares two snapshots; a counter that went down means the node
  // restarted, and that interval has no rate.
  function rates(prev, cur) {
    const out = new Map();
    if (!prev) return out;
    const dt = (cur.at - prev.at) / 1000;
    if (dt <= 0) return out;
    for (const [key, c] of cur.methods) {
      const p = prev.methods.get(key) || { ok: 0, err: 0, attempts: 0, failovers: {} };
      const d = (a, b) => a - (b || 0);
      const r = {
        ops: d(c.ok + c.err, p.ok + p.err),
        err: d(c.err, p.err),
        attempts: d(c.attempts, p.attempts),
        failovers: {},
      };
      for (const [reason, n] of Object.entries(c.failovers)) r.failovers[reason] = d(n, p.failovers[reason]);
      if (r.ops < 0 || r.err < 0 || r.attempts < 0 || Object.values(r.failovers).some((x) => x < 0)) {
        return null;
      }
      r.dt = dt;
      out.set(key, r);
    }
    return out;
  }

  // --- rendering -------------------------------------------------------------

  let polls = 0;

  function update(ms, snap, ops, ready) {
    document.body.classList.remove("stale");
    // For tests and the curious: how many answers the page has shown.
    document.body.dataset.polls = String(++polls);
    renderHeader(ms, ready);
    trackMembers(ms);
    renderGroups(ms);
    const r = rates(counters, snap);
    if (r === null) addEvent("node", "reset", "counters went down: the node restarted");
    trackCounters(r);
    renderCounters(snap, r, ops);
    renderOps(ops);
    counters = snap;
  }

  function renderHeader(ms, ready) {
    const self = ms.find((m) => m.local);
    $("node").textContent = self ? "seen from " + self.name + " (group " + self.group + ")" : "seen from a node that is not a member";
    const b = $("ready");
    b.hidden = false;
    b.textContent = ready.ready ? "ready" : "not ready: " + (ready.error || "unknown reason");
    b.className = "badge " + (ready.ready ? "state-alive" : "state-dead");
  }

  function stateClass(state) {
    return "state-" + (STATE_CLASS[state] || "other");
  }

  function badge(text, cls) {
    return el("span", "badge " + cls, text);
  }

  function renderGroups(ms) {
    const groups = new Map();
    for (const m of ms) {
      if (!groups.has(m.group)) groups.set(m.group, []);
      groups.get(m.group).push(m);
    }
    const root = $("groups");
    root.replaceChildren();
    for (const g of [...groups.keys()].sort()) {
      const list = groups.get(g).sort((a, b) => a.name.localeCompare(b.name));
      const live = list.filter((m) => m.state === "alive" || m.state === "suspect").length;
      const col = el("div", "group" + (live === 0 ? " group-down" : ""));
      col.dataset.group = g;
      const h = el("h3", "", "group " + (g || "(none)"));
      h.append(el("span", "muted", " " + live + " of " + list.length + " live"));
      col.append(h);
      for (const m of list) col.append(memberCard(m));
      root.append(col);
    }
  }

  function memberCard(m) {
    const card = el("div", "member " + stateClass(m.state));
    card.dataset.member = m.name;
    card.dataset.state = m.state;
    if (m.catching_up === true) card.dataset.catchingUp = "true";
    const top = el("div", "member-top");
    top.append(el("strong", "", m.name));
    if (m.local) top.append(el("span", "muted", " this node"));
    top.append(badge(m.state || "unknown", stateClass(m.state)));
    if (m.catching_up === true) top.append(badge("catching up", "state-catching"));
    card.append(top);
    card.append(row("since", m.since ? since(m.since) : "—"));
    card.append(row("address", m.address || "—"));
    card.append(row("gossip", m.gossip_address || "—"));
    if (m.services && m.services.length) card.append(row("serves", m.services.join(", ")));
    return card;
  }

  function row(k, v) {
    const d = el("div", "kv");
    d.append(el("span", "k", k), el("span", "v", v));
    return d;
  }

  function trackMembers(ms) {
    const next = new Map(ms.map((m) => [m.name, m]));
    if (members !== null) {
      for (const [name, m] of next) {
        const p = members.get(name);
        if (!p) {
          addEvent("member", m.state, name + " appeared, " + m.state, name);
        } else if (p.state !== m.state) {
          addEvent("member", m.state, name + ": " + p.state + " → " + m.state, name);
        }
        if (p && (p.catching_up === true) !== (m.catching_up === true)) {
          addEvent("member", "catching", name + (m.catching_up ? " is catching up" : " has caught up"), name);
        }
      }
      for (const name of members.keys()) {
        if (!next.has(name)) addEvent("member", "left", name + " is no longer listed", name);
      }
    }
    members = next;
  }

  // erring holds the methods whose last interval had errors: an error
  // event marks when errors begin and end, not every second of them.
  const erring = new Set();

  function trackCounters(r) {
    if (!r) return;
    let ops = 0, err = 0, fo = 0;
    for (const [key, x] of r) {
      ops += x.ops;
      err += x.err;
      const reasons = Object.entries(x.failovers).filter(([, n]) => n > 0);
      const n = reasons.reduce((a, [, k]) => a + k, 0);
      fo += n;
      if (n > 0) {
        addEvent("failover", "failover", key + ": " + n + (n === 1 ? " failover (" : " failovers (") +
          reasons.map(([reason, k]) => reason + " " + k).join(", ") + ")");
      }
      if (x.err > 0 && !erring.has(key)) {
        erring.add(key);
        addEvent("error", "errors", key + ": operations fail (" + x.err + " in " + x.dt.toFixed(1) + " s)");
      } else if (x.err === 0 && erring.has(key)) {
        erring.delete(key);
        addEvent("recovered", "no errors", key + ": operations succeed again");
      }
    }
    const dt = r.size ? r.values().next().value.dt : 1;
    history_.push({ ops: ops / dt, failovers: fo / dt, errors: err / dt });
    if (history_.length > HISTORY) history_ = history_.slice(-HISTORY);
  }

  function renderCounters(snap, r, ops) {
    let clientInFlight = 0, serverInFlight = 0;
    const totalFailovers = {};
    for (const m of snap.methods.values()) {
      clientInFlight += m.clientInFlight;
      serverInFlight += m.serverInFlight;
      for (const [reason, n] of Object.entries(m.failovers)) totalFailovers[reason] = (totalFailovers[reason] || 0) + n;
    }
    const byState = {};
    for (const o of ops) byState[o.state] = (byState[o.state] || 0) + 1;
    const last = history_[history_.length - 1];

    const tiles = $("tiles");
    tiles.replaceChildren(
      tile("operations/s", last ? fmtRate(last.ops) : "—", "ops", sparkline(history_.map((h) => h.ops), "line-ops")),
      tile("failovers/s", last ? fmtRate(last.failovers) : "—", "failovers", sparkline(history_.map((h) => h.failovers), "line-failovers")),
      tile("errors/s", last ? fmtRate(last.errors) : "—", "errors", sparkline(history_.map((h) => h.errors), "line-errors")),
      tile("attempts in flight", String(clientInFlight), "client-in-flight"),
      tile("handlers running", String(serverInFlight), "server-in-flight"),
      tile("queued", String(byState.queued || 0), "queued"),
      tile("held", String(byState.held || 0), "held"),
    );

    const t = el("table", "rates");
    const head = el("tr");
    for (const h of ["method", "ops/s", "errors/s", "failovers/s by reason", "ok", "errors", "failovers by reason", "in flight (client/server)"]) {
      head.append(el("th", "", h));
    }
    t.append(head);
    for (const key of [...snap.methods.keys()].sort()) {
      const m = snap.methods.get(key);
      const x = r && r.get(key);
      const tr = el("tr");
      tr.dataset.method = key;
      const rateFo = x ? Object.entries(x.failovers).filter(([, n]) => n > 0).map(([k, n]) => k + " " + fmtRate(n / x.dt)).join(", ") : "";
      const totFo = Object.entries(m.failovers).map(([k, n]) => k + " " + n).join(", ");
      tr.append(
        el("td", "", key),
        el("td", "num", x ? fmtRate(x.ops / x.dt) : "—"),
        el("td", "num", x ? fmtRate(x.err / x.dt) : "—"),
        el("td", "", rateFo || "—"),
        el("td", "num", String(m.ok)),
        el("td", "num", String(m.err)),
        el("td", "", totFo || "—"),
        el("td", "num", m.clientInFlight + " / " + m.serverInFlight),
      );
      t.append(tr);
    }
    const totals = Object.entries(totalFailovers).map(([k, n]) => k + " " + n).join(", ");
    const note = el("p", "muted", "Failovers since this node started: " + (totals || "none") + ".");
    $("rates").replaceChildren(snap.methods.size ? t : el("p", "muted", "No operations counted yet."), note);
  }

  function tile(label, value, name, extra) {
    const d = el("div", "tile");
    d.dataset.tile = name;
    d.append(el("div", "tile-value", value), el("div", "tile-label", label));
    if (extra) d.append(extra);
    return d;
  }

  function sparkline(values, cls) {
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 " + HISTORY + " 30");
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("class", "spark");
    const max = Math.max(1e-9, ...values);
    const step = values.length > 1 ? HISTORY / (values.length - 1) : 0;
    const pts = values.map((v, i) => (i * step).toFixed(1) + "," + (29 - (v / max) * 27).toFixed(1)).join(" ");
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts);
    line.setAttribute("class", cls);
    svg.append(line);
    return svg;
  }

  function renderOps(ops) {
    $("ops-count").textContent = ops.length + (ops.length > MAX_OPS ? ", the oldest " + MAX_OPS + " shown" : "");
    const t = $("ops");
    t.replaceChildren();
    const head = el("tr");
    for (const h of ["age", "side", "method", "entities", "attempt", "node", "state"]) head.append(el("th", "", h));
    t.append(head);
    const now = Date.now() + clockSkew;
    for (const o of ops.slice(0, MAX_OPS)) {
      // A second attempt or later is an operation that failed over.
      const tr = el("tr", o.attempt > 1 ? "failed-over" : "");
      tr.append(
        el("td", "num", fmtAge(now - Date.parse(o.started))),
        el("td", "", o.side),
        el("td", "", o.service + "." + o.method),
        el("td", "", (o.entities || []).join(", ")),
        el("td", "num", String(o.attempt)),
        el("td", "", o.node || ""),
        el("td", "", o.state),
      );
      t.append(tr);
    }
    if (ops.length === 0) {
      const tr = el("tr");
      const td = el("td", "muted", "none");
      td.colSpan = 7;
      tr.append(td);
      t.append(tr);
    }
  }

  function addEvent(kind, state, text, member) {
    const li = el("li", "event event-" + kind);
    li.dataset.kind = kind;
    li.dataset.state = state;
    if (member) li.dataset.member = member;
    li.append(el("span", "muted", clock(new Date()) + " "));
    li.append(badge(state, kind === "member" ? stateClass(state) : "kind-" + kind));
    li.append(document.createTextNode(" " + text));
    events.unshift(li);
    events.length = Math.min(events.length, MAX_EVENTS);
    $("events").replaceChildren(...events);
  }

  // --- formatting ----------------------------------------------------------------

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function clock(d) {
    return d.toLocaleTimeString([], { hour12: false });
  }

  function since(iso) {
    const t = Date.parse(iso);
    if (Number.isNaN(t)) return iso;
    const age = Date.now() + clockSkew - t;
    const d = new Date(t);
    const when = age < 86400000 ? clock(d) : d.toLocaleDateString() + " " + clock(d);
    return when + " (" + fmtAge(age) + " ago)";
  }

  function fmtAge(ms) {
    if (!(ms >= 0)) ms = 0;
    const s = ms / 1000;
    if (s < 10) return s.toFixed(1) + " s";
    if (s < 120) return Math.round(s) + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    if (s < 172800) return Math.round(s / 3600) + " h";
    return Math.round(s / 86400) + " days";
  }

  function fmtRate(v) {
    if (v >= 100) return v.toFixed(0);
    if (v >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }

  tick();
})();
