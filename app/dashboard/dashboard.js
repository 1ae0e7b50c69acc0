// The node's dashboard: polls /v1/overview once a second (an answer that asks no shard actor),
// keeps five minutes of samples in the page, and draws rates, percentiles, the shard grid,
// endpoints and recent problems. No build step, no dependencies.
"use strict";

const STATES = [
  ["-", "elsewhere", "--elsewhere"], ["H", "held", "--held"], ["X", "blocked", "--blocked"], ["I", "invoking", "--invoking"],
  ["B", "backoff", "--backoff"], ["D", "due", "--due"], ["W", "waiting", "--waiting"], [".", "idle", "--idle"],
];
const HISTORY = 300;  // samples (seconds)
const WINDOW = 10;    // seconds of histogram deltas per percentile point
const samples = [];   // {t, appends, fsyncs, invocations, fsyncHist, invHist}
let lastGrid = "";
let cell = 4, perRow = 240;

const css = getComputedStyle(document.documentElement);
const colour = Object.fromEntries(STATES.map(([c, , v]) => [c, css.getPropertyValue(v).trim()]));
const stateName = Object.fromEntries(STATES.map(([c, n]) => [c, n]));

function el(id) { return document.getElementById(id); }
function text(node, s) { node.textContent = s; }

function rowsOf(reply, kind) { return reply.rows.filter(r => r.kind === kind); }

function addHist(a, b) {  // element-wise sum of bucket counts
  if (!a) return b ? { bounds: b.bounds, counts: b.counts.slice(), count: b.count } : null;
  if (!b) return a;
  return { bounds: a.bounds, counts: a.counts.map((x, i) => x + (b.counts[i] || 0)), count: a.count + b.count };
}

function diffHist(now, then) {
  if (!now) return null;
  if (!then) return now;
  return { bounds: now.bounds, counts: now.counts.map((x, i) => x - (then.counts[i] || 0)), count: now.count - then.count };
}

function quantile(h, q) {
  if (!h || h.count <= 0) return null;
  const rank = q * h.count;
  let seen = 0;
  for (let i = 0; i < h.counts.length; i++) {
    const next = seen + h.counts[i];
    if (next >= rank && h.counts[i] > 0) {
      if (i >= h.bounds.length) return h.bounds[h.bounds.length - 1];
      const lo = i === 0 ? 0 : h.bounds[i - 1];
      return lo + (h.bounds[i] - lo) * ((rank - seen) / h.counts[i]);
    }
    seen = next;
  }
  return h.bounds[h.bounds.length - 1];
}

function fmtSeconds(s) {
  if (s === null || s === undefined) return "–";
  if (s < 0.001) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
  return s.toFixed(2) + " s";
}

function fmtRate(r) { return r === null ? "–" : r >= 100 ? r.toFixed(0) : r.toFixed(1); }

function drawSeries(canvas, series, colours, fmt) {
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  ctx.clearRect(0, 0, w, h);
  let max = 0;
  for (const s of series) for (const v of s) if (v !== null && v > max) max = v;
  if (max <= 0) max = 1;
  series.forEach((s, k) => {
    ctx.strokeStyle = colours[k];
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let started = false;
    s.forEach((v, i) => {
      if (v === null) { started = false; return; }
      const x = w - (s.length - 1 - i) * (w / (HISTORY - 1));
      const y = h - 2 - (v / max) * (h - 12);
      if (!started) { ctx.moveTo(x, y); started = true; } else ctx.lineTo(x, y);
    });
    ctx.stroke();
  });
  ctx.fillStyle = "#757575";
  ctx.font = "10px system-ui";
  ctx.fillText(fmt(max), 2, 10);
}

function rateSeries(key) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = samples[i].t - samples[i - 1].t;
    const dv = samples[i][key] - samples[i - 1][key];
    out.push(dt > 0 && dv >= 0 ? dv / dt : null);
  }
  return out;
}

function quantileSeries(key, q) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const j = Math.max(0, i - WINDOW);
    out.push(quantile(diffHist(samples[i][key], samples[j][key]), q));
  }
  return out;
}

function drawCharts() {
  const last = a => (a.length ? a[a.length - 1] : null);
  const appends = rateSeries("appends"), fsyncs = rateSeries("fsyncs"), invs = rateSeries("invocations");
  drawSeries(el("c-appends"), [appends], ["#1565c0"], fmtRate);
  drawSeries(el("c-fsyncs"), [fsyncs], ["#6a1b9a"], fmtRate);
  drawSeries(el("c-invocations"), [invs], ["#2e7d32"], fmtRate);
  text(el("v-appends"), fmtRate(last(appends)));
  text(el("v-fsyncs"), fmtRate(last(fsyncs)));
  text(el("v-invocations"), fmtRate(last(invs)));
  const f50 = quantileSeries("fsyncHist", 0.5), f99 = quantileSeries("fsyncHist", 0.99);
  drawSeries(el("c-fsync-lat"), [f50, f99], ["#1565c0", "#c62828"], fmtSeconds);
  text(el("v-fsync-lat"), fmtSeconds(last(f50)) + " / " + fmtSeconds(last(f99)));
  const i50 = quantileSeries("invHist", 0.5), i99 = quantileSeries("invHist", 0.99);
  drawSeries(el("c-inv-lat"), [i50, i99], ["#1565c0", "#c62828"], fmtSeconds);
  text(el("v-inv-lat"), fmtSeconds(last(i50)) + " / " + fmtSeconds(last(i99)));
}

function drawGrid(grid) {
  const canvas = el("grid");
  const n = grid.length;
  const width = Math.min(960, Math.max(320, canvas.parentElement.clientWidth - 4));
  // Cells shrink with the shard count: 100,000 shards are 2-pixel cells (about 210 rows).
  cell = n <= 2000 ? 12 : n <= 10000 ? 6 : n <= 40000 ? 3 : n <= 160000 ? 2 : 1;
  perRow = Math.max(1, Math.floor(width / cell));
  const rows = Math.ceil(n / perRow);
  if (canvas.width !== perRow * cell || canvas.height !== Math.max(rows * cell, cell)) {
    canvas.width = perRow * cell;
    canvas.height = Math.max(rows * cell, cell);
  }
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(canvas.width, canvas.height);
  const rgb = {};
  for (const [c] of STATES) {
    const hex = colour[c].replace("#", "");
    rgb[c] = [parseInt(hex.slice(0, 2), 16), parseInt(hex.slice(2, 4), 16), parseInt(hex.slice(4, 6), 16)];
  }
  const gap = cell >= 4 ? 1 : 0;
  for (let s = 0; s < n; s++) {
    const c = rgb[grid[s]] || rgb["."];
    const x0 = (s % perRow) * cell, y0 = Math.floor(s / perRow) * cell;
    for (let y = y0; y < y0 + cell - gap; y++)
      for (let x = x0; x < x0 + cell - gap; x++) {
        const p = (y * canvas.width + x) * 4;
        img.data[p] = c[0]; img.data[p + 1] = c[1]; img.data[p + 2] = c[2]; img.data[p + 3] = 255;
      }
  }
  ctx.putImageData(img, 0, 0);
  lastGrid = grid;
}

function shardAt(ev) {
  const canvas = el("grid");
  const r = canvas.getBoundingClientRect();
  const x = (ev.clientX - r.left) * (canvas.width / r.width);
  const y = (ev.clientY - r.top) * (canvas.height / r.height);
  const s = Math.floor(y / cell) * perRow + Math.floor(x / cell);
  return s >= 0 && s < lastGrid.length ? s : -1;
}

// A node with [[token]]s answers 401 without `Authorization: Bearer`: ask once for a token of the
// read scope, keep it for this tab only (sessionStorage), and send it with every request.
async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem("fusee-token");
  if (token) headers["Authorization"] = "Bearer " + token;
  const res = await fetch(path, { cache: "no-store", headers });
  if (res.status === 401 && !api.asking) {
    api.asking = true;
    const given = window.prompt("This node requires a token (read scope or above):");
    api.asking = false;
    if (given) {
      sessionStorage.setItem("fusee-token", given.trim());
      return api(path);
    }
  }
  return res;
}

async function showShard(s) {
  try {
    const res = await api("/v1/shards/" + s);
    const row = await res.json();
    const keep = Object.entries(row).filter(([k]) => k !== "histograms");
    text(el("shard-detail"), keep.map(([k, v]) => k + "=" + JSON.stringify(v)).join("  "));
  } catch (e) {
    text(el("shard-detail"), "shard " + s + ": no answer (" + e.message + ")");
  }
}

function renderEndpoints(endpoints, invokerRuns) {
  const body = el("endpoints").tBodies[0];
  body.replaceChildren();
  if (endpoints.length === 0) {
    const tr = body.insertRow();
    const td = tr.insertCell();
    td.colSpan = 7;
    text(td, invokerRuns ? "the invoker has not listed its endpoints yet" : "no [[endpoint]] configured: the invoker is off");
    return;
  }
  for (const e of endpoints) {
    const tr = body.insertRow();
    text(tr.insertCell(), e.id);
    if (!e.answered) {  // it missed the inspector's deadline: busy or stuck
      const td = tr.insertCell();
      td.colSpan = 6;
      td.className = "health-backoff";
      text(td, "no answer within the inspector's deadline (a busy or stuck endpoint actor)");
      continue;
    }
    text(tr.insertCell(), e.url);
    const health = tr.insertCell();
    health.className = "health-" + e.state;
    text(health, e.state === "backoff" ? "backing off (" + e.backoffMs + " ms, " + e.failuresInARow + " in a row)"
      : e.state === "failing" ? "failing (" + e.failuresInARow + " in a row)" : e.state);
    const bar = tr.insertCell();
    const track = document.createElement("span");
    track.className = "bar track";
    const fill = document.createElement("span");
    fill.className = "bar";
    fill.style.width = Math.min(100, (100 * e.inFlight) / Math.max(1, e.concurrency)) + "%";
    track.appendChild(fill);
    bar.appendChild(track);
    bar.appendChild(document.createTextNode(" " + e.inFlight + "/" + e.concurrency));
    text(tr.insertCell(), e.invocations);
    text(tr.insertCell(), e.failed + e.timedOut + e.unleased);
    const err = tr.insertCell();
    if (e.state !== "backoff" && e.state !== "failing") err.className = "muted";  // recovered since
    text(err, e.lastError ? e.lastError + (e.lastErrorAtMs ? " (" + new Date(e.lastErrorAtMs).toLocaleTimeString() + ")" : "") : "");
  }
}

// The cluster's nodes as this node sees them (hidden outside a cluster); a node that is not up
// is marked bad and says why.
function renderCluster(members) {
  el("cluster-section").hidden = !members || members.length === 0;
  if (!members) return;
  const body = el("cluster").tBodies[0];
  body.replaceChildren();
  for (const m of members) {
    const tr = body.insertRow();
    text(tr.insertCell(), m.name);
    const st = tr.insertCell();
    const pill = document.createElement("span");
    pill.className = "pill " + (m.state === "up" || m.state === "self" ? "ok" : "bad");
    text(pill, m.state === "self" ? "this node" : m.state);
    st.appendChild(pill);
    text(tr.insertCell(), m.shards);
    text(tr.insertCell(), m.listen);
    text(tr.insertCell(), new Date(m.sinceMs).toLocaleTimeString());
    text(tr.insertCell(), m.callsForwarded);
    text(tr.insertCell(), m.callsFailedFast);
    text(tr.insertCell(), m.error);
  }
}

function renderNode(actors) {
  const body = el("node-table").tBodies[0];
  body.replaceChildren();
  const add = (k, v) => { const tr = body.insertRow(); text(tr.insertCell(), k); text(tr.insertCell(), v); };
  const dir = rowsOf(actors, "directory")[0], log = rowsOf(actors, "log")[0], sch = rowsOf(actors, "scheduler")[0];
  const sessions = rowsOf(actors, "session");
  add("sessions", sessions.length + " (" + ["worker", "invoked", "client", "handshake"].map(r => sessions.filter(s => s.state === r).length + " " + r).join(", ") + ")");
  if (dir) {
    add("leases granted / revoked", dir.leasesGranted + " / " + dir.leasesRevoked);
    add("parked calls / messages", dir.parkedCalls + " / " + dir.parkedMessages);
  }
  if (log) {
    add("log", log.state + ", " + log.records + " records in " + log.fsyncs + " fsyncs, " + log.segments + " segments, " + log.queued + " queued");
    if (log.failure) add("log failure", log.failure);
  }
  if (sch) add("invoker", sch.state + ", " + sch.invocationsInFlight + " invocations in flight, " + sch.crashes + " crashes, " + sch.noProgress + " without progress");
  for (const k of actors.kinds) add("mailboxes: " + k.kind, k.actors + " actors, " + k.mailboxTotal + " queued, max " + k.mailboxMax);
}

async function tick() {
  let o;
  try {
    const res = await api("/v1/overview");
    if (!res.ok) throw new Error("HTTP " + res.status);
    o = await res.json();
  } catch (e) {
    el("status").className = "pill bad";
    text(el("status"), "no answer: " + e.message);
    return;
  }
  // A view that missed the inspector's deadline leaves the grid and counts partial: say so.
  const missing = (o.shards.noAnswer || []).concat(o.actors.noAnswer || []);
  el("status").className = missing.length ? "pill bad" : "pill ok";
  text(el("status"), missing.length ? "partial: no answer from " + missing.join(", ") : "live");
  text(el("node"), o.actors.node + " · " + o.shards.shards + " shards");
  text(el("updated"), "updated " + new Date().toLocaleTimeString());
  const log = rowsOf(o.actors, "log")[0] || {};
  const endpoints = rowsOf(o.actors, "endpoint");
  let invHist = null, invocations = 0;
  for (const e of endpoints) {
    invocations += e.invocations;
    invHist = addHist(invHist, e.histograms && e.histograms.invocation_duration_seconds);
  }
  const sample = {
    t: performance.now() / 1000, appends: log.appends || 0, fsyncs: log.fsyncs || 0, invocations,
    fsyncHist: log.histograms ? log.histograms.fsync_seconds : null, invHist,
  };
  const prev = samples[samples.length - 1];
  if (prev && (sample.appends < prev.appends || sample.fsyncs < prev.fsyncs || sample.invocations < prev.invocations))
    samples.length = 0;  // the node restarted: its counters began again
  samples.push(sample);
  if (samples.length > HISTORY) samples.shift();
  drawCharts();
  drawGrid(o.shards.grid || "");
  // (Another node's shards are counted in a cluster only, blocked ones once the log failed.)
  text(el("shard-counts"), STATES.filter(([c, n]) => (c !== "-" && c !== "X") || o.shards.states[n])
    .map(([, n]) => (o.shards.states[n] || 0) + " " + n).join(" · "));
  renderEndpoints(endpoints, rowsOf(o.actors, "scheduler").length > 0);
  renderNode(o.actors);
  renderCluster(o.cluster);
  const list = el("problems");
  list.replaceChildren();
  for (const p of o.problems.slice().reverse()) {
    const li = document.createElement("li");
    text(li, p);
    list.appendChild(li);
  }
  document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
}

// Script errors are counted on <body> (data-js-errors) for the headless-browser test and shown.
function trapErrors() {
  const note = msg => {
    document.body.dataset.jsErrors = String(Number(document.body.dataset.jsErrors || 0) + 1);
    document.body.dataset.lastJsError = msg;
  };
  window.addEventListener("error", e => note(e.message));
  window.addEventListener("unhandledrejection", e => note(String(e.reason)));
}

function start() {
  trapErrors();
  const legend = el("legend");
  for (const [c, n] of STATES) {
    const span = document.createElement("span");
    const i = document.createElement("i");
    i.style.background = colour[c];
    span.appendChild(i);
    span.appendChild(document.createTextNode(n));
    legend.appendChild(span);
  }
  const grid = el("grid");
  grid.addEventListener("mousemove", ev => {
    const s = shardAt(ev);
    if (s >= 0) text(el("shard-detail"), "shard " + s + ": " + stateName[lastGrid[s]] + " (click for details)");
  });
  grid.addEventListener("click", ev => { const s = shardAt(ev); if (s >= 0) showShard(s); });
  // The next poll starts a second after the last one ended, so a slow node is never asked twice
  // at once.
  const loop = () => tick().finally(() => setTimeout(loop, 1000));
  loop();
}

start();
