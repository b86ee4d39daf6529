// detwan operator console (docs/console.md). Plain JavaScript, no framework, no build step.
// Asks for a bearer token once (kept in sessionStorage, sent with every data request), learns
// from GET /v1/whoami whether it may reserve, then polls the agent's JSON API every second and
// renders reservations, gateways, live tunnel delays and the links' calendars. Every value from
// the API goes into the page as text (textContent), never as HTML.
"use strict";

const POLL_MS = 1000;
const CALENDAR_EVERY_MS = 5000;
const TOKEN_KEY = "detwan-console-token";

const state = {
  token: null,        // "" = no Authorization header (an agent without tokens)
  who: null,          // GET /v1/whoami
  topology: null,
  reservations: [],
  gateways: [],
  tunnels: {},        // gateway name -> GET /v1/gateways/{name}/tunnels
  calendar: null,
  calendarAt: 0,
  calendarFor: "",    // the reservations (id:version) the calendar was fetched after
  timer: null,
  session: 0,         // a new sign-in or sign-out ends the polls of the one before
};

// ------------------------------------------------------------------------------- formatting

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function rate(bps) {
  if (bps === null || bps === undefined) return "";
  const units = [[1e9, "Gbit/s"], [1e6, "Mbit/s"], [1e3, "kbit/s"]];
  for (const [scale, unit] of units) {
    if (bps >= scale) return `${+(bps / scale).toFixed(bps % scale === 0 ? 0 : 2)} ${unit}`;
  }
  return `${bps} bit/s`;
}

function duration(ns) {
  if (ns === null || ns === undefined) return "";
  const a = Math.abs(ns);
  if (a >= 3600e9 && ns % 3600e9 === 0) return `${ns / 3600e9} h`;
  if (a >= 60e9 && ns % 60e9 === 0) return `${ns / 60e9} min`;
  if (a >= 1e9) return `${(ns / 1e9).toFixed(2)} s`;
  if (a >= 1e6) return `${(ns / 1e6).toFixed(2)} ms`;
  if (a >= 1e3) return `${(ns / 1e3).toFixed(1)} µs`;
  return `${ns} ns`;
}

function clock(unixNs) {
  if (!unixNs) return "";
  return new Date(unixNs / 1e6).toISOString().slice(5, 16).replace("T", " ");
}

// "10mbit", "2.5 Gbit", "800k" -> bit/s (NaN if not a rate).
function parseRate(text) {
  const m = /^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmg]?)(?:bit|bps|b)?(?:\/s)?\s*$/i.exec(text);
  if (!m) return NaN;
  const scale = { "": 1, k: 1e3, m: 1e6, g: 1e9 }[m[2].toLowerCase()];
  return Math.round(parseFloat(m[1]) * scale);
}

// The scheduler job a reservation belongs to: the Slurm plugin reserves with the request id
// "slurm-JOBID-SITE_A-SITE_B" (control/slurm/plugin_config.h); other request ids as they are.
function schedulerJob(r) {
  const id = r.client_request_id || "";
  const slurm = /^slurm-([0-9]+)-/.exec(id);
  if (slurm) return `slurm job ${slurm[1]}`;
  return id;
}

function owner(r) {
  if (r.requester_domain) return `domain ${r.requester_domain}`;
  return r.tenant ? `tenant ${r.tenant}` : "operator";
}

// ------------------------------------------------------------------------------- the API

function headers(extra) {
  const h = Object.assign({ Accept: "application/json" }, extra || {});
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  return h;
}

async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}),
                 cache: "no-store" };
  if (body !== undefined) init.body = JSON.stringify(body);
  const answer = await fetch(path, init);
  let doc = null;
  try { doc = await answer.json(); } catch (e) { doc = null; }
  if (!answer.ok) {
    const why = doc && doc.error ? `${doc.error.code}: ${doc.error.message}` : answer.statusText;
    const err = new Error(`${method} ${path}: ${answer.status} ${why}`);
    err.status = answer.status;
    throw err;
  }
  return doc;
}

function setStatus(text, bad) {
  const s = $("status");
  s.textContent = text;
  s.className = bad ? "status bad" : "status";
}

// ------------------------------------------------------------------------------- sign-in

async function signIn(token) {
  state.session += 1;
  state.token = token;
  try {
    state.who = await api("GET", "/v1/whoami");
  } catch (e) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    $("token-error").textContent = e.status === 401 ? "the agent refused this token" : e.message;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $("token-error").textContent = "";
  $("sign-in").hidden = true;
  $("main").hidden = false;
  $("sign-out").hidden = false;
  const who = state.who;
  const verbs = ["read", who.may_reserve ? "reserve" : null, who.may_admin ? "admin" : null]
    .filter(Boolean).join(", ");
  const name = who.kind === "token" ? `token ${who.name}` : who.kind;
  const tenant = who.kind === "token" ? ` (tenant ${who.tenant || "*"})` : "";
  $("identity").textContent = `${name}${tenant}: may ${verbs}`;
  for (const e of document.querySelectorAll(".write-only")) e.hidden = !who.may_reserve;
  poll();
}

function signOut() {
  state.session += 1;
  sessionStorage.removeItem(TOKEN_KEY);
  clearTimeout(state.timer);
  state.timer = null;
  state.token = null;
  state.who = null;
  $("main").hidden = true;
  $("sign-out").hidden = true;
  $("sign-in").hidden = false;
  $("identity").textContent = "not signed in";
  setStatus("");
}

// ------------------------------------------------------------------------------- polling

async function poll() {
  clearTimeout(state.timer);
  if (state.who === null) return;
  const session = state.session;
  try {
    const [topology, reservations, gateways] = await Promise.all([
      api("GET", "/v1/topology"), api("GET", "/v1/reservations"), api("GET", "/v1/gateways")]);
    state.topology = topology;
    state.reservations = reservations.reservations;
    state.gateways = gateways.gateways;
    const live = await Promise.all(state.gateways.map(
      (g) => api("GET", `/v1/gateways/${encodeURIComponent(g.name)}/tunnels`)
        .catch((e) => ({ gateway: g.name, reachable: false, error: e.message, tunnels: [] }))));
    state.tunnels = {};
    for (const t of live) state.tunnels[t.gateway] = t;
    // Every 5 s, and at once when a reservation changed.
    const changes = state.reservations.map((r) => `${r.id}:${r.version}`).join(",");
    if (Date.now() - state.calendarAt >= CALENDAR_EVERY_MS || changes !== state.calendarFor) {
      state.calendar = await api("GET", "/v1/calendar?horizon_s=21600&step_s=600");
      state.calendarAt = Date.now();
      state.calendarFor = changes;
    }
    if (session !== state.session) return;
    render();
    setStatus(`updated ${new Date().toISOString().slice(11, 19)} UTC`, false);
  } catch (e) {
    if (session !== state.session) return;
    setStatus(`agent: ${e.message}`, true);
    if (e.status === 401) { signOut(); return; }
  }
  if (state.who !== null && session === state.session) state.timer = setTimeout(poll, POLL_MS);
}

// ------------------------------------------------------------------------------- rendering

function fill(tbody, rows, columns) {
  const body = tbody.tagName === "TBODY" ? tbody : tbody.querySelector("tbody");
  const next = document.createDocumentFragment();
  for (const row of rows) next.appendChild(row);
  if (rows.length === 0) {
    const tr = el("tr");
    const td = el("td", "none", "empty");
    td.colSpan = columns;
    tr.appendChild(td);
    next.appendChild(tr);
  }
  body.replaceChildren(next);
}

function cell(tr, text, cls) {
  const td = el("td", text, cls);
  tr.appendChild(td);
  return td;
}

// Each gateway's live row for a tunnel id: [{gateway, tunnel}].
function liveTunnels(tunnelId) {
  const out = [];
  for (const [gw, answer] of Object.entries(state.tunnels)) {
    for (const t of answer.tunnels || []) {
      if (t.id === tunnelId) out.push({ gateway: gw, tunnel: t });
    }
  }
  return out;
}

// One line per gateway at the tunnel's ends: what it received (the WAN's one-way delay).
function delayLines(tunnelId) {
  const parts = [];
  for (const { gateway, tunnel } of liveTunnels(tunnelId)) {
    // The last 10 s when packets arrived in them (the gateway's windowed percentiles), else
    // everything since the tunnel was added.
    const recent = tunnel.rx.recent_wan_delay_ns;
    const d = recent || tunnel.rx.wan_delay_ns;
    if (!d) continue;
    parts.push(`at ${gateway}: p50 ${duration(d.p50)}, p99 ${duration(d.p99)} ` +
               (recent ? `last 10 s (${recent.count} of ${tunnel.rx.received_packets} pkts)`
                       : `(${tunnel.rx.received_packets} pkts)`));
  }
  return parts.length ? parts : ["no traffic yet"];
}

function latenessText(tunnelId) {
  let late = 0;
  let worst = null;
  let seen = false;
  for (const { tunnel } of liveTunnels(tunnelId)) {
    seen = true;
    late += tunnel.rx.late_packets;
    const l = tunnel.rx.lateness_ns;
    if (l && (worst === null || l.max > worst)) worst = l.max;
  }
  if (!seen) return "";
  return late === 0 ? "0 late" : `${late} late, max ${duration(worst)}`;
}

function actionButton(label, id, action) {
  const b = el("button", label);
  b.type = "button";
  b.dataset.id = id;
  b.dataset.action = action;
  return b;
}

function renderReservations() {
  const rows = [];
  const list = state.reservations.slice().sort(
    (a, b) => parseInt(b.id.slice(2), 10) - parseInt(a.id.slice(2), 10));
  for (const r of list) {
    const tr = el("tr");
    tr.dataset.id = r.id;
    cell(tr, r.id);
    cell(tr, owner(r));
    cell(tr, schedulerJob(r), "job");
    cell(tr, r.state, `state state-${r.state}`);
    cell(tr, rate(r.min_bandwidth_bps), "num");
    cell(tr, (r.path || []).join(" → "));
    const b = r.bound || {};
    cell(tr, b.max_latency_ns ? `≤ ${duration(b.max_latency_ns)} ± ` +
              `${duration(b.max_latency_variation_ns)}` : "");
    cell(tr, `${clock(r.spec.start_unix_ns)} – ${clock(r.spec.end_unix_ns)}`);
    cell(tr, r.tunnel_id || "", "num");
    const delay = cell(tr, null, "delay");
    delay.id = `delay-${r.id}`;
    for (const line of delayLines(r.tunnel_id)) delay.appendChild(el("div", line));
    cell(tr, latenessText(r.tunnel_id), "lateness");
    const actions = el("td", null, "write-only");
    actions.hidden = !state.who.may_reserve;
    if (state.who.may_reserve) {
      if (r.state === "provisioned") actions.appendChild(actionButton("release", r.id, "release"));
      if (r.state === "committed" || r.state === "released") {
        actions.appendChild(actionButton("provision", r.id, "provision"));
      }
      if (r.state !== "terminated" && r.state !== "failed") {
        actions.appendChild(actionButton("terminate", r.id, "terminate"));
      }
    }
    tr.appendChild(actions);
    rows.push(tr);
  }
  fill($("reservations"), rows, 12);
  const live = state.reservations.filter((r) => r.state !== "terminated" && r.state !== "failed");
  $("reservation-count").textContent = `${live.length} live, ${state.reservations.length} in all`;
}

function renderGateways() {
  const rows = [];
  for (const g of state.gateways) {
    const tr = el("tr");
    tr.dataset.gateway = g.name;
    cell(tr, g.name);
    cell(tr, g.site);
    cell(tr, g.reachable ? "yes" : "no", g.reachable ? "ok" : "bad");
    cell(tr, g.in_sync ? "yes" : "no", g.in_sync ? "ok" : "warn");
    cell(tr, g.generation, "num");
    cell(tr, (g.boot_id || "").slice(0, 8), "muted");
    const refused = Object.keys(g.tunnels_refused || {}).length;
    cell(tr, `${g.tunnels_in_place.length} in place` + (refused ? `, ${refused} refused` : ""));
    cell(tr, g.report_age_ns === null ? "never" : `${duration(g.report_age_ns)} ago`);
    cell(tr, g.error || "", g.error ? "error" : "");
    rows.push(tr);
  }
  fill($("gateways"), rows, 9);
}

function renderTunnels() {
  const rows = [];
  for (const g of state.gateways) {
    const answer = state.tunnels[g.name];
    if (!answer) continue;
    if (!answer.reachable) {
      const tr = el("tr");
      cell(tr, g.name);
      const td = cell(tr, `stats unavailable: ${answer.error}`, "error");
      td.colSpan = 9;
      rows.push(tr);
      continue;
    }
    for (const t of answer.tunnels) {
      const tr = el("tr");
      tr.dataset.gateway = g.name;
      tr.dataset.tunnel = t.id;
      cell(tr, g.name);
      cell(tr, t.id, "num");
      cell(tr, t.reservation || `(${t.owner || "config"})`, t.reservation ? "" : "muted");
      cell(tr, t.peer);
      cell(tr, rate(t.rate_bps), "num");
      cell(tr, `${t.rx.received_packets} pkts`, "num");
      const w = t.rx.wan_delay_ns;
      cell(tr, w ? `${duration(w.p50)} / ${duration(w.p99)}` : "", "num");
      const o = t.rx.one_way_delay_ns;
      cell(tr, o ? duration(o.p99) : "", "num");
      cell(tr, t.rx.late_packets, "num");
      cell(tr, t.rx.lateness_ns ? duration(t.rx.lateness_ns.max) : "", "num");
      rows.push(tr);
    }
  }
  fill($("tunnels"), rows, 10);
}

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

// The reserved rate of one link direction over the calendar's steps, as bars against the
// reservable rate (the dashed line); each bar's tooltip gives its time and rate.
function calendarSvg(reserved, reservable, from, step) {
  const w = 360, h = 36, n = reserved.length;
  const bar = w / n;
  const top = Math.max(reservable, ...reserved, 1);
  const s = svg("svg", { width: w, height: h, viewBox: `0 0 ${w} ${h}`, class: "calendar",
                         role: "img" });
  s.appendChild(svg("rect", { x: 0.5, y: 0.5, width: w - 1, height: h - 1, class: "frame" }));
  reserved.forEach((bps, i) => {
    const bh = (bps / top) * (h - 2);
    const r = svg("rect", { x: i * bar, y: h - 1 - bh, width: Math.max(bar - 1, 1), height: bh,
                            class: "reserved" });
    const title = svg("title", {});
    title.textContent = `${clock(from + i * step)} UTC: ${rate(bps)} reserved`;
    r.appendChild(title);
    s.appendChild(r);
  });
  const y = h - 1 - (reservable / top) * (h - 2);
  s.appendChild(svg("line", { x1: 0, x2: w, y1: y, y2: y, class: "limit" }));
  const wrap = el("div", null, "calendar");
  wrap.appendChild(s);
  const axis = el("div", null, "axis");
  axis.appendChild(el("span", "now"));
  axis.appendChild(el("span", `+${duration(n * step)}`));
  wrap.appendChild(axis);
  return wrap;
}

function renderLinks() {
  const rows = [];
  const cal = state.calendar;
  const byName = {};
  for (const l of (cal ? cal.links : [])) byName[l.name] = l;
  for (const link of (state.topology ? state.topology.links : [])) {
    link.directions.forEach((d, i) => {
      const tr = el("tr");
      tr.dataset.link = link.name;
      cell(tr, i === 0 ? link.name : "");
      cell(tr, `${d.from} → ${d.to}`);
      cell(tr, i === 0 ? rate(link.capacity_bps) : "", "num");
      cell(tr, i === 0 ? rate(link.reservable_bps) : "", "num");
      cell(tr, i === 0 ? duration(link.delay_ns) : "", "num");
      cell(tr, rate(d.reserved_bps_now) || "0", "num");
      const td = el("td");
      const c = byName[link.name];
      if (c) {
        td.appendChild(calendarSvg(c.directions[i].reserved_bps, c.reservable_bps,
                                   cal.from_unix_ns, cal.step_ns));
      }
      tr.appendChild(td);
      rows.push(tr);
    });
  }
  fill($("links"), rows, 7);
  if (cal) {
    $("calendar-range").textContent = `${clock(cal.from_unix_ns)} – ` +
      `${clock(cal.from_unix_ns + cal.steps * cal.step_ns)} UTC, ` +
      `${duration(cal.step_ns)} per bar, dashed: reservable`;
  }
}

function renderSites() {
  if (!state.topology) return;
  $("domain").textContent = `domain ${state.topology.domain}, agent ${state.topology.agent}`;
  for (const id of ["reserve-src", "reserve-dst"]) {
    const select = $(id);
    const names = state.topology.sites.map((s) => s.name);
    const have = Array.from(select.options).map((o) => o.value);
    if (have.join(",") === names.join(",")) continue;
    select.replaceChildren(...names.map((n) => { const o = el("option", n); o.value = n; return o; }));
    if (id === "reserve-dst" && names.length > 1) select.value = names[1];
  }
}

function render() {
  renderSites();
  renderReservations();
  renderGateways();
  renderTunnels();
  renderLinks();
}

// ------------------------------------------------------------------------------- actions

function reportResult(text, bad) {
  const r = $("form-result");
  r.textContent = text;
  r.className = bad ? "error" : "muted";
}

async function act(id, action) {
  try {
    const r = await api("POST", `/v1/reservations/${encodeURIComponent(id)}/${action}`);
    reportResult(`${action} ${id}: ${r.state}`, false);
  } catch (e) {
    reportResult(e.message, true);
  }
  poll();
}

async function reserve(event) {
  event.preventDefault();
  const bps = parseRate($("reserve-rate").value);
  const minutes = parseFloat($("reserve-duration").value);
  if (!(bps > 0) || !(minutes > 0)) {
    reportResult("rate (like 10mbit) and duration (minutes) must be positive", true);
    return;
  }
  const body = { src: $("reserve-src").value, dst: $("reserve-dst").value,
                 min_bandwidth_bps: bps, duration_ns: Math.round(minutes * 60e9) };
  const latency = parseFloat($("reserve-latency").value);
  if (latency > 0) body.max_latency_ns = Math.round(latency * 1e6);
  if ($("reserve-provision").checked) body.provision = true; else body.commit = true;
  reportResult("reserving…", false);
  try {
    const r = await api("POST", "/v1/reservations", body);
    reportResult(`reserved ${r.id}: ${r.state}`, false);
  } catch (e) {
    reportResult(e.message, true);
  }
  poll();
}

function release(event) {
  event.preventDefault();
  const id = $("release-id").value.trim();
  if (!/^r-[0-9]+$/.test(id)) {
    reportResult("a reservation id looks like r-3", true);
    return;
  }
  act(id, "release");
}

document.addEventListener("DOMContentLoaded", () => {
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    signIn($("token").value.trim());
  });
  $("sign-out").addEventListener("click", signOut);
  $("reserve-form").addEventListener("submit", reserve);
  $("release-form").addEventListener("submit", release);
  $("reservations").addEventListener("click", (event) => {
    const b = event.target.closest("button[data-action]");
    if (b) act(b.dataset.id, b.dataset.action);
  });
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved !== null) signIn(saved);
});
