// sigx dashboard: polls /api/fleet (a complete snapshot each time) and renders it; the actor
// search asks /api/actors/where and /api/actors/list. No framework, no build step.
"use strict";

const $ = (sel) => document.querySelector(sel);
let pollMs = 1000;
let lastOk = 0;
let found = null; // the host id the last search found, highlighted in the fleet table

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("data")) e.setAttribute(k.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase()), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c === null || c === undefined ? "" : String(c));
  return e;
}

function td(text, cls, testid) {
  return el("td", { class: cls, "data-testid": testid }, text);
}

const ms = (v) => (v === null || v === undefined ? "–" : `${v < 10 ? v.toFixed(2) : v.toFixed(1)} ms`);
const sum = (obj) => Object.values(obj || {}).reduce((a, b) => a + b, 0);

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function hostRow(h) {
  const state = h.reachable === null ? `${h.state} (not asked)` : h.state;
  const membership = h.viewStatus === null
    ? "not in any view"
    : `${h.viewStatus}${h.seenBy > 1 ? ` (in ${h.seenBy} views)` : ""}`;
  // No type list: a host that publishes none registers all; a sidecar never heard is unknown.
  const types = h.types !== null ? h.types.join(", ") || "(none)"
    : h.reachable === false && h.id === null ? "–" : "(all)";
  const app = h.appConnected === null ? "–" : h.appConnected ? "connected" : "not connected";
  const acts = h.activations === null ? "–"
    : `${sum(h.activations)}` + (Object.keys(h.activations).length
      ? ` (${Object.entries(h.activations).map(([t, n]) => `${t}=${n}`).join(", ")})` : "");
  const lat = h.latency;
  const tr = el("tr", {
    "data-host-id": h.id || "",
    "data-source": h.source || "",
    "data-state": h.state,
    "data-reachable": String(h.reachable),
    class: [h.reachable === false ? "unreachable" : "", found && h.id === found ? "found" : ""].join(" ").trim(),
    title: h.error || h.fenceReason || "",
  });
  tr.append(
    td(h.id || "(never answered)", "", "host-id"),
    td(h.source || "– (known from a view only)", "", "host-source"),
    td(state + (h.fenceReason ? `: ${h.fenceReason}` : "") + (h.error ? ` (${h.error})` : ""),
      `state-${h.state}`, "host-state"),
    td(membership, "", "host-membership"),
    td(h.nodeText, h.node === null ? "silent" : "", "host-node"),
    td(types, "", "host-types"),
    td(app, "", "host-app"),
    td(acts, "num", "host-activations"),
    td(lat ? lat.calls : h.latencyError ? "?" : "–", "num", "host-calls"),
    td(lat ? ms(lat.meanMs) : "–", "num", "host-mean"),
    td(lat ? ms(lat.p99AtMostMs) : "–", "num", "host-p99"),
    td(h.partitionsRecovering === null ? "–" : h.partitionsRecovering, "num", "host-recovering"),
  );
  return tr;
}

// With --kubernetes: the ActorCluster as the operator reports it, or why the API was not read.
function kubernetesLine(k) {
  if (!k) return "";
  if (k.error) return `Kubernetes API: ${k.error}`;
  const parts = [`ActorCluster ${k.namespace}/${k.cluster}`];
  if (k.summary) parts.push(`operator: ${k.summary}`);
  if (k.note) parts.push(k.note);
  for (const c of k.conditions || []) parts.push(`${c.type} ${c.status} (${c.reason}: ${c.message})`);
  for (const u of k.unreadableLeases || []) parts.push(`unreadable: ${u}`);
  return parts.join(" · ");
}

function render(s) {
  const k = kubernetesLine(s.kubernetes);
  $("#kubernetes").hidden = !k;
  $("#kubernetes").textContent = k;
  $("#summary").textContent = s.summary.text;
  const r = s.summary;
  $("#reachability").textContent = `· ${r.reachable} of ${r.asked} sidecar(s) answered` +
    (r.unreachable ? `, ${r.unreachable} unreachable` : "");
  $("#fenced").textContent = r.fenced.length ? `fenced: ${r.fenced.join(", ")}` : "";
  $("#leaving").textContent = r.leaving.length ? `leaving: ${r.leaving.join(", ")}` : "";
  $("#recovering").textContent = r.partitionsRecovering
    ? `${r.partitionsRecovering} partition(s) recovering` : "";
  fill($("#hosts tbody"), s.hosts.map(hostRow));

  const types = Object.entries(s.activationsByType);
  fill($("#activations tbody"), types.length
    ? types.map(([t, n]) => {
      const tr = el("tr", { "data-type": t });
      tr.append(td(t), td(n, "num", "activation-count"));
      return tr;
    })
    : [el("tr", {}, el("td", { colspan: 2 }, "no live activations"))]);

  const lat = s.latency;
  const latRows = lat
    ? [["calls", lat.calls], ["mean", ms(lat.meanMs)], ["p50 ≤", ms(lat.p50AtMostMs)],
       ["p99 ≤", ms(lat.p99AtMostMs)],
       ...Object.entries(lat.byKind).map(([k, n]) => [`result ${k}`, n]),
       ["hosts measured", s.latencyHosts]]
    : [["no host's /metrics is known", "–"]];
  fill($("#latency tbody"), latRows.map(([k, v]) => {
    const tr = el("tr", { "data-metric": k });
    tr.append(td(k), td(v, "num"));
    return tr;
  }));

  fill($("#counters tbody"), Object.entries(s.counters).map(([k, v]) => {
    const tr = el("tr", { "data-counter": k });
    tr.append(td(k), td(v, "num"));
    return tr;
  }));
}

async function poll() {
  try {
    const resp = await fetch("/api/fleet", { cache: "no-store" });
    if (!resp.ok) throw new Error(`/api/fleet answered ${resp.status}`);
    const s = await resp.json();
    pollMs = s.pollMs || pollMs;
    render(s);
    lastOk = Date.now();
    $("#stale").hidden = true;
  } catch (e) {
    const banner = $("#stale");
    banner.hidden = false;
    banner.textContent = `the dashboard does not answer (${e.message}): the figures below are ` +
      (lastOk ? `from ${new Date(lastOk).toLocaleTimeString()}` : "not loaded");
  }
  setTimeout(poll, pollMs);
}

setInterval(() => {
  if (lastOk) $("#updated").textContent = `updated ${((Date.now() - lastOk) / 1000).toFixed(1)} s ago`;
}, 250);

async function search(ev) {
  ev.preventDefault();
  const q = $("#search-input").value.trim();
  const out = $("#search-result");
  if (!q) return;
  const url = q.includes("/")
    ? `/api/actors/where?actor=${encodeURIComponent(q)}`
    : `/api/actors/list?type=${encodeURIComponent(q)}`;
  out.replaceChildren(el("span", {}, "searching…"));
  let r;
  try {
    r = await (await fetch(url, { cache: "no-store" })).json();
  } catch (e) {
    out.replaceChildren(el("span", { class: "error" }, `search failed: ${e.message}`));
    return;
  }
  if (r.error) {
    out.replaceChildren(el("span", { class: "error", "data-testid": "search-error" }, r.error));
    return;
  }
  if (q.includes("/")) {
    found = r.active ? r.hostId : null;
    out.replaceChildren(r.active
      ? el("p", { "data-testid": "search-found", "data-host-id": r.hostId },
        `${q} is active on host ${r.hostId} (activation ${r.activationId}` +
        (r.epoch ? `, epoch ${r.epoch}` : "") + `; asked via ${r.askedVia})`)
      : el("p", { "data-testid": "search-not-active" },
        `${q} is not active: no activation of it is registered anywhere (a call activates it)`));
  } else {
    found = null;
    const table = el("table", { "data-testid": "search-list" });
    table.append(el("thead", {}), el("tbody", {}));
    table.tHead.append(Object.assign(el("tr"), { innerHTML: "<th>actor</th><th>host</th><th>activation</th>" }));
    for (const a of r.actors) {
      const tr = el("tr", { "data-key": a.key, "data-host-id": a.hostId });
      tr.append(td(`${r.actorType}/${a.key}`), td(a.hostId), td(a.activationId));
      table.tBodies[0].append(tr);
    }
    const hosts = new Set(r.actors.map((a) => a.hostId));
    const note = el("p", { "data-testid": "search-summary" },
      `${r.actors.length} live actor(s) of type ${r.actorType} on ${hosts.size} host(s)` +
      (r.truncated ? " (the first ones only)" : "") +
      (r.incomplete ? `; incomplete: ${r.skipped.map((s) => `${s.partitions} partition(s) of ${s.owner || "(no owner)"}: ${s.reason}`).join("; ")}` : ""));
    out.replaceChildren(note, table);
  }
}

$("#search").addEventListener("submit", search);
poll();
