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
    replicas: "../replicas",
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
      const [ms, metrics, ops, ready, replicas] = await Promise.all([
        get(ROUTES.members), get(ROUTES.metrics, true), get(ROUTES.ops), get(ROUTES.ready), get(ROUTES.replicas),
      ]);
      if (unreachableSince !== null) {
        addEvent("recovered", "reachable", "this node answers again");
        unreachableSince = null;
      }
      update(ms, parseMetrics(metrics), ops, ready, replicas);
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

  // parseMetrics reads the Prometheus text format into per-method counters:
  // what the node served (ffgen_server_*, the server's side of every call
  // it answered) and what it sent as a client (ffgen_operations_total and
  // the attempt families). hasStats is false when the node exports no
  // per-method family at all: it was started without a cluster.Stats.
  function parseMetrics(text) {
    // reported: failovers clients saw, "client|service.method|reason" → count.
    // pending and pendingLimit, waiting and waitingLimit: the server's
    // admission (null when not exported); limits: the client's limit to
    // each node, by node.
    const snap = { at: Date.now(), methods: new Map(), hasStats: false, hasServed: false, reported: new Map(), pending: null, pendingLimit: null, waiting: null, waitingLimit: null, limits: new Map() };
    const limit = (peer) => {
      let p = snap.limits.get(peer);
      if (!p) {
        p = { limit: 0, inFlight: 0, waiting: 0 };
        snap.limits.set(peer, p);
      }
      return p;
    };
    const method = (l) => {
      const key = l.service + "." + l.method;
      let m = snap.methods.get(key);
      if (!m) {
        m = {
          ok: 0, err: 0, attempts: 0, failovers: {}, refusedAttempts: 0, clientInFlight: 0, serverInFlight: 0,
          handled: {}, latency: { buckets: [], sum: 0, count: 0 },
        };
        snap.methods.set(key, m);
      }
      return m;
    };
    for (const line of text.split("\n")) {
      if (line.startsWith("# TYPE ffgen_operations_total")) snap.hasStats = true;
      if (line.startsWith("# TYPE ffgen_server_handled_total")) snap.hasServed = true;
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
        case "ffgen_attempts_ended_total":
          if (labels.reason === "refused") method(labels).refusedAttempts = v;
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
        case "ffgen_server_handled_total":
          method(labels).handled[answerKind(labels.status, labels.code)] =
            (method(labels).handled[answerKind(labels.status, labels.code)] || 0) + v;
          break;
        case "ffgen_server_handler_duration_seconds_bucket":
          method(labels).latency.buckets.push([Number(labels.le), v]);
          break;
        case "ffgen_server_handler_duration_seconds_sum":
          method(labels).latency.sum = v;
          break;
        case "ffgen_server_handler_duration_seconds_count":
          method(labels).latency.count = v;
          break;
        case "ffgen_client_failovers_reported_total":
          snap.reported.set(labels.client + "|" + labels.service + "." + labels.method + "|" + labels.reason, v);
          break;
        case "ffgen_server_pending":
          snap.pending = v;
          break;
        case "ffgen_server_pending_limit":
          snap.pendingLimit = v;
          break;
        case "ffgen_server_queued":
          snap.waiting = v;
          break;
        case "ffgen_server_queued_limit":
          snap.waitingLimit = v;
          break;
        case "ffgen_client_limit":
          limit(labels.peer).limit = v;
          break;
        case "ffgen_client_limit_in_flight":
          limit(labels.peer).inFlight = v;
          break;
        case "ffgen_client_limit_waiting":
          limit(labels.peer).waiting = v;
          break;
      }
    }
    for (const m of snap.methods.values()) {
      m.served = sum(m.handled);
      m.latency.buckets.sort((a, b) => a[0] - b[0]);
    }
    return snap;
  }

  // answerKind names what a server answer was: "ok", a declared error the
  // caller gets back ("declared CODE"), a failure ("failed CODE": an
  // undeclared error, a panic, a timeout, a failover the handler asked
  // for), a refusal (the node ran nothing: "refused CODE") or "forwarded".
  function answerKind(status, code) {
    switch (status) {
      case "ok":
      case "forwarded":
        return status;
      case "refused":
        return "refused " + code;
      case "fail":
        if (code && code !== "undeclared" && !code.startsWith("ffgen.")) return "declared " + code;
    }
    return "failed " + (code || status);
  }

  const kindClass = (kind) => kind.split(" ")[0];

  const sum = (o) => Object.values(o).reduce((a, b) => a + b, 0);

  // rates compares two snapshots; a counter that went down means the node
  // restarted, and that interval has no rate.
  function rates(prev, cur) {
    const out = new Map();
    if (!prev) return out;
    const dt = (cur.at - prev.at) / 1000;
    if (dt <= 0) return out;
    // Failovers clients reported since the last poll; a client that
    // restarted starts again from zero.
    out.reported = new Map();
    out.reportedDt = dt;
    for (const [key, n] of cur.reported) {
      const d = n - (prev.reported.get(key) || 0);
      out.reported.set(key, d >= 0 ? d : n);
    }
    const none = { ok: 0, err: 0, attempts: 0, refusedAttempts: 0, failovers: {}, handled: {}, served: 0, latency: { buckets: [], sum: 0, count: 0 } };
    for (const [key, c] of cur.methods) {
      const p = prev.methods.get(key) || none;
      const d = (a, b) => a - (b || 0);
      const r = {
        ops: d(c.ok + c.err, p.ok + p.err),
        err: d(c.err, p.err),
        attempts: d(c.attempts, p.attempts),
        refusedAttempts: d(c.refusedAttempts, p.refusedAttempts),
        served: d(c.served, p.served),
        failovers: {},
        handled: {},
        latency: latencyDelta(p.latency, c.latency),
      };
      for (const [reason, n] of Object.entries(c.failovers)) r.failovers[reason] = d(n, p.failovers[reason]);
      for (const [kind, n] of Object.entries(c.handled)) r.handled[kind] = d(n, p.handled[kind]);
      const counts = [r.ops, r.err, r.attempts, r.served, ...Object.values(r.failovers), ...Object.values(r.handled)];
      if (counts.some((x) => x < 0)) return null;
      r.failed = sumKind(r.handled, "failed");
      r.refused = sumKind(r.handled, "refused");
      r.declared = sumKind(r.handled, "declared");
      r.dt = dt;
      out.set(key, r);
    }
    return out;
  }

  function sumKind(handled, kind) {
    let n = 0;
    for (const [k, v] of Object.entries(handled)) if (kindClass(k) === kind) n += v;
    return n;
  }

  // latencyDelta is the handler latency of one interval: its mean and the
  // bucket bound under which 99% of its calls ran.
  function latencyDelta(p, c) {
    const count = c.count - p.count;
    if (!(count > 0)) return null;
    const prevAt = new Map(p.buckets);
    let p99 = Infinity;
    for (const [le, n] of c.buckets) {
      if (n - (prevAt.get(le) || 0) >= 0.99 * count) {
        p99 = le;
        break;
      }
    }
    return { mean: (c.sum - p.sum) / count, p99 };
  }

  // --- rendering -------------------------------------------------------------

  let polls = 0;

  function update(ms, snap, ops, ready, replicas) {
    document.body.classList.remove("stale");
    // For tests and the curious: how many answers the page has shown.
    document.body.dataset.polls = String(++polls);
    renderHeader(ms, ready);
    trackMembers(ms);
    renderGroups(ms);
    trackReplicas(replicas);
    renderReplicas(replicas);
    hasClientStats = snap.hasStats;
    const r = rates(counters, snap);
    if (r === null) addEvent("node", "reset", "counters went down: the node restarted");
    trackCounters(r);
    renderCounters(snap, r, ops);
    renderOps(ops, r);
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

  // replicas holds the last answer of /cluster/replicas, by service.
  let replicas = null;

  function trackReplicas(list) {
    const next = new Map(list.map((st) => [st.service, st]));
    if (replicas !== null) {
      for (const [svc, st] of next) {
        const p = replicas.get(svc);
        if (!p) {
          addEvent("replica", "replica", svc + ": replicated here, " + (st.ready ? "serving" : "not serving: " + st.not_ready));
          continue;
        }
        if ((p.leader || "") !== (st.leader || "")) {
          addEvent("replica", "leader", svc + ": leader " + (p.leader || "none") + " → " + (st.leader || "none") + " (term " + st.term + ")");
        } else if (p.term !== st.term) {
          addEvent("replica", "term", svc + ": term " + p.term + " → " + st.term);
        }
        if (p.ready !== st.ready) {
          if (st.ready) addEvent("recovered", "serving", svc + ": this node serves it again");
          else addEvent("replica", "catching", svc + ": this node does not serve it: " + (st.not_ready || "unknown reason"));
        }
        if (!p.stopped && st.stopped) addEvent("error", "stopped", svc + ": this node stopped applying: " + (st.not_ready || ""));
        if (st.snapshots_installed > p.snapshots_installed) addEvent("replica", "snapshot", svc + ": copied a snapshot from the leader (index " + st.snapshot_index + ")");
      }
    }
    replicas = next;
  }

  function renderReplicas(list) {
    const root = $("replicas");
    root.closest("section").hidden = list.length === 0;
    const t = el("table", "rates");
    const head = el("tr");
    for (const h of ["service", "this node", "leader", "term", "committed", "applied", "behind", "log kept", "voters", "learners", "serving"]) {
      head.append(el("th", "", h));
    }
    t.append(head);
    for (const st of list) {
      const tr = el("tr");
      tr.dataset.service = st.service;
      tr.dataset.leader = st.leader || "";
      const role = (st.role || "not in the group") + (st.tie_breaker ? " (tie-breaker)" : "") + (st.leading ? ", leader" : "");
      const serving = el("td", "");
      serving.append(badge(st.ready ? "serving" : st.stopped ? "stopped" : "not serving", st.ready ? "state-alive" : st.stopped ? "state-dead" : "state-catching"));
      if (!st.ready && st.not_ready) serving.append(document.createTextNode(" " + st.not_ready));
      tr.append(
        el("td", "", st.service),
        el("td", "", role),
        el("td", "", st.leader || "none known"),
        el("td", "num", String(st.term)),
        el("td", "num", String(st.commit)),
        el("td", "num", String(st.applied)),
        el("td", "num", String(Math.max(0, st.commit - st.applied))),
        el("td", "num", st.log_first + "–" + st.log_last),
        el("td", "", (st.voters || []).join(", ")),
        el("td", "", (st.learners || []).join(", ") || "—"),
        serving,
      );
      t.append(tr);
    }
    const parts = [t];
    // Every node's log as the leader sees it (raft's progress); a
    // follower knows only its own applied index.
    for (const st of list) {
      if (!st.peers || !st.peers.length) continue;
      parts.push(el("h3", "", st.service + ": every node's log, as this node (the leader) replicates it"));
      const pt = el("table", "rates peers");
      const ph = el("tr");
      for (const h of ["node", "role", "replicated to", "behind the leader", "raft state", "answering"]) ph.append(el("th", "", h));
      pt.append(ph);
      for (const p of st.peers) {
        const tr = el("tr");
        tr.dataset.service = st.service;
        tr.dataset.peer = p.node;
        tr.dataset.behind = String(p.behind);
        tr.append(
          el("td", "", p.node + (p.node === st.leader ? " (leader)" : "")),
          el("td", "", p.learner ? "learner" : "voter"),
          el("td", "num", String(p.match)),
          el("td", "num", String(p.behind)),
          el("td", "", p.state),
          el("td", "", p.active ? "yes" : "no"),
        );
        pt.append(tr);
      }
      parts.push(pt);
    }
    if (list.length && !list.some((st) => st.peers && st.peers.length)) {
      parts.push(el("p", "muted", "Every node's replicated index is on the leader's page; this node shows its own applied index."));
    }
    root.replaceChildren(...parts);
  }

  // erring, failing and refusing hold the methods whose last interval had
  // client errors, server failures or refusals: an event marks when they
  // begin and end, not every second of them.
  const erring = new Set();
  const failing = new Set();
  const refusing = new Set();

  // edge adds an event when n starts or stops being non-zero for key.
  function edge(set, key, n, kind, state, start, stop) {
    if (n > 0 && !set.has(key)) {
      set.add(key);
      addEvent(kind, state, start);
    } else if (n === 0 && set.has(key)) {
      set.delete(key);
      addEvent("recovered", "ended", stop);
    }
  }

  // hasClientStats: the node exports its clients' counters (a Stats).
  let hasClientStats = false;

  function trackCounters(r) {
    if (!r) return;
    let ops = 0, err = 0, fo = 0, served = 0, failed = 0, refused = 0;
    for (const [key, x] of r) {
      ops += x.ops;
      err += x.err;
      served += x.served;
      failed += x.failed;
      refused += x.refused;
      const reasons = Object.entries(x.failovers).filter(([, n]) => n > 0);
      const n = reasons.reduce((a, [, k]) => a + k, 0);
      fo += n;
      if (n > 0) {
        addEvent("failover", "failover", key + ": " + n + (n === 1 ? " failover (" : " failovers (") +
          reasons.map(([reason, k]) => reason + " " + k).join(", ") + ")");
      }
      const kinds = (kind) => Object.entries(x.handled).filter(([k, v]) => v > 0 && kindClass(k) === kind)
        .map(([k, v]) => k.slice(kind.length + 1) + " " + v).join(", ");
      edge(erring, key, x.err, "error", "errors", key + ": calls this node made fail (" + x.err + " in " + x.dt.toFixed(1) + " s)",
        key + ": calls this node makes succeed again");
      edge(failing, key, x.failed, "error", "failures", key + ": this node's answers fail (" + kinds("failed") + " in " + x.dt.toFixed(1) + " s)",
        key + ": this node's answers no longer fail");
      edge(refusing, key, x.refused + x.refusedAttempts, "refusal", "refused",
        key + ": attempts refused, nothing run (" + (kinds("refused") || "by the nodes this one called: " + x.refusedAttempts) + ")",
        key + ": no more refusals");
    }
    // Failovers clients saw: one event per client and method per poll.
    const seen = new Map();
    for (const [key, n] of r.reported || []) {
      if (n <= 0) continue;
      const [client, method, reason] = key.split("|");
      const k = client + "|" + method;
      if (!seen.has(k)) seen.set(k, []);
      seen.get(k).push(reason + " " + n);
      fo += client === "local" && hasClientStats ? 0 : n; // a local client with a Stats is counted above
    }
    for (const [k, reasons] of seen) {
      const [client, method] = k.split("|");
      addEvent("failover", "failover", method + ": failovers seen by " + (client === "local" ? "this node's clients" : "client " + client) +
        " (" + reasons.join(", ") + ")");
    }
    const dt = r.reportedDt || (r.size ? r.values().next().value.dt : 1);
    history_.push({ served: served / dt, ops: ops / dt, failovers: fo / dt, errors: (err + failed) / dt });
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

    $("tiles").replaceChildren(
      tile("calls served/s", last ? fmtRate(last.served) : "—", "served", sparkline(history_.map((h) => h.served), "line-ops")),
      tile("calls made/s", last ? fmtRate(last.ops) : "—", "ops", sparkline(history_.map((h) => h.ops), "line-ops")),
      tile("failovers/s", last ? fmtRate(last.failovers) : "—", "failovers", sparkline(history_.map((h) => h.failovers), "line-failovers")),
      tile("failures/s", last ? fmtRate(last.errors) : "—", "errors", sparkline(history_.map((h) => h.errors), "line-errors")),
      tile("handlers running", String(serverInFlight), "server-in-flight"),
      tile("attempts in flight", String(clientInFlight), "client-in-flight"),
      tile("queued", String(byState.queued || 0), "queued"),
      tile("held", String(byState.held || 0), "held"),
      tile("pending / admission limit", snap.pending === null ? "—" :
        snap.pending + " / " + (snap.pendingLimit > 0 ? snap.pendingLimit : "no limit"), "pending"),
      tile("waiting to start / limit", snap.waiting === null ? "—" :
        snap.waiting + " / " + (snap.waitingLimit > 0 ? snap.waitingLimit : "no limit"), "waiting"),
    );

    const keys = [...snap.methods.keys()].sort();
    const servedKeys = keys.filter((k) => snap.methods.get(k).served > 0);
    const madeKeys = keys.filter((k) => snap.methods.get(k).attempts > 0);

    // What this node answered, from the server's own counters.
    const st = el("table", "rates served");
    const sh = el("tr");
    for (const h of ["method", "served/s", "ok/s", "declared errors/s", "failures/s", "refused/s", "latency mean / p99", "since start: ok", "declared errors", "failures", "refused"]) {
      sh.append(el("th", "", h));
    }
    st.append(sh);
    for (const key of servedKeys) {
      const m = snap.methods.get(key);
      const x = r && r.get(key);
      const tr = el("tr");
      tr.dataset.method = key;
      tr.dataset.served = String(m.served);
      const per = (n) => (x ? fmtRate(n / x.dt) : "—");
      const total = (kind) => Object.entries(m.handled).filter(([k, v]) => v > 0 && kindClass(k) === kind)
        .map(([k, v]) => k.slice(kind.length + 1) + " " + v).join(", ") || "0";
      tr.append(
        el("td", "", key),
        el("td", "num", per(x && x.served)),
        el("td", "num", per(x && (x.handled.ok || 0))),
        el("td", "num", per(x && x.declared)),
        el("td", "num", per(x && x.failed)),
        el("td", "num", per(x && x.refused)),
        el("td", "num", x && x.latency ? fmtDur(x.latency.mean) + " / " + (x.latency.p99 === Infinity ? "> 10 s" : "≤ " + fmtDur(x.latency.p99)) : "—"),
        el("td", "num", String(m.handled.ok || 0)),
        el("td", "", total("declared")),
        el("td", "", total("failed")),
        el("td", "", total("refused")),
      );
      st.append(tr);
    }

    // What this node sent as a client.
    const t = el("table", "rates made");
    const head = el("tr");
    for (const h of ["method", "calls/s", "failed/s", "failovers/s by reason", "ok", "failed", "failovers by reason", "in flight (client/server)"]) {
      head.append(el("th", "", h));
    }
    t.append(head);
    for (const key of madeKeys) {
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
    const parts = [];
    if (!snap.hasServed) {
      parts.push(el("p", "error", "This node exports no counts of the calls it served: give its ManagementConfig " +
        "its *runtime.Server (in Replicas or Ops)."));
    }
    parts.push(el("h3", "", "Served by this node"));
    parts.push(servedKeys.length ? st : el("p", "muted", "No calls served yet."));
    parts.push(el("p", "muted", "Declared errors are answers the service declares (//ff:fail), returned to the caller as themselves; " +
      "failures are undeclared errors, panics, timeouts and failovers; refused attempts ran nothing " +
      "(refused ffgen.overloaded: past the node's admission limit, the pending tile above)."));
    if (madeKeys.length) {
      parts.push(el("h3", "", "Made by this node as a client"), t);
      parts.push(el("p", "muted", "Failovers since this node started: " + (totals || "none") + "."));
    } else if (!snap.hasStats) {
      parts.push(el("p", "muted", "Calls this node makes as a client are counted here when its runtime.ClientConfig " +
        "and its ManagementConfig have the same cluster.NewStats() as Metrics; their failovers are shown below in any case."));
    }
    parts.push(el("h3", "", "Failovers seen by clients"));
    parts.push(reportedTable(snap, r));
    if (snap.limits.size) {
      const lt = el("table", "rates limits");
      const lh = el("tr");
      for (const h of ["node", "limit", "in flight", "waiting for a slot"]) lh.append(el("th", "", h));
      lt.append(lh);
      for (const peer of [...snap.limits.keys()].sort()) {
        const p = snap.limits.get(peer);
        const tr = el("tr");
        tr.dataset.peer = peer;
        tr.append(el("td", "", peer), el("td", "num", String(p.limit)), el("td", "num", String(p.inFlight)), el("td", "num", String(p.waiting)));
        lt.append(tr);
      }
      parts.push(el("h3", "", "This node's limits as a client"), lt);
      parts.push(el("p", "muted", "The attempts it keeps in flight to each node at once, learned from the node's refusals " +
        "for overload and its timeouts; attempts past the limit wait here for a slot."));
    }
    $("rates").replaceChildren(...parts);
  }

  // reportedTable lists the failovers clients saw: this node's own
  // clients ("local") and thin clients that read the membership here.
  function reportedTable(snap, r) {
    if (snap.reported.size === 0) {
      return el("p", "muted", "None reported: clients in this node's process and thin clients that read the membership from it report theirs.");
    }
    const t = el("table", "rates reported");
    const head = el("tr");
    for (const h of ["client", "method", "reason", "since start", "per second"]) head.append(el("th", "", h));
    t.append(head);
    for (const key of [...snap.reported.keys()].sort()) {
      const [client, method, reason] = key.split("|");
      const tr = el("tr");
      tr.dataset.client = client;
      tr.dataset.method = method;
      const d = r && r.reported ? r.reported.get(key) || 0 : null;
      tr.append(
        el("td", "", client === "local" ? "this node's clients" : client),
        el("td", "", method),
        el("td", "", reason),
        el("td", "num", String(snap.reported.get(key))),
        el("td", "num", d === null ? "—" : fmtRate(d / r.reportedDt)),
      );
      t.append(tr);
    }
    return t;
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

  function renderOps(ops, r) {
    let note = ops.length + (ops.length > MAX_OPS ? ", the oldest " + MAX_OPS + " shown" : "");
    if (ops.length === 0 && r && r.size) {
      // Calls that end between two polls are not caught in flight: say how
      // many there were, so that an empty list reads as what it is.
      let served = 0, made = 0, dt = 1, mean = 0, count = 0;
      for (const x of r.values()) {
        served += x.served;
        made += x.ops;
        dt = x.dt;
        if (x.latency) {
          mean += x.latency.mean * x.served;
          count += x.served;
        }
      }
      if (served + made > 0) {
        note = "none right now: " + fmtRate((served + made) / dt) + " calls/s end between polls" +
          (count ? ", a handler runs " + fmtDur(mean / count) + " on average" : "");
      }
    }
    $("ops-count").textContent = note;
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

  function fmtDur(sec) {
    if (!(sec >= 0)) return "—";
    if (sec < 0.001) return Math.round(sec * 1e6) + " µs";
    if (sec < 1) return (sec * 1000).toFixed(sec < 0.01 ? 2 : 1) + " ms";
    return sec.toFixed(2) + " s";
  }

  function fmtRate(v) {
    if (v >= 100) return v.toFixed(0);
    if (v >= 10) return v.toFixed(1);
    return v.toFixed(2);
  }

  tick();
})();
