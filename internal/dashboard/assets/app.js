// spendgate spend dashboard: plain DOM, no build step, no external network.
// Money stays a decimal string: it is compared and formatted as text, and
// only basis points (integers from the server) place pixels.
"use strict";

const state = { budgets: [], want: 0, total: 0, near: 0, over: 0, sort: { key: "used_bp", dir: -1 }, filter: "", period: "", which: "", selected: null, now: null };
const $ = (id) => document.getElementById(id);
const SVGNS = "http://www.w3.org/2000/svg";

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// cmpDec compares two decimal strings exactly ("-12.5" < "3").
function cmpDec(a, b) {
  const na = a.startsWith("-"), nb = b.startsWith("-");
  if (na !== nb) return na ? -1 : 1;
  const s = na ? -1 : 1;
  const [ai, af = ""] = (na ? a.slice(1) : a).split(".");
  const [bi, bf = ""] = (nb ? b.slice(1) : b).split(".");
  const ia = ai.replace(/^0+(?=\d)/, ""), ib = bi.replace(/^0+(?=\d)/, "");
  if (ia.length !== ib.length) return s * (ia.length < ib.length ? -1 : 1);
  if (ia !== ib) return s * (ia < ib ? -1 : 1);
  const n = Math.max(af.length, bf.length);
  const fa = af.padEnd(n, "0"), fb = bf.padEnd(n, "0");
  return fa === fb ? 0 : s * (fa < fb ? -1 : 1);
}

// money formats a decimal string with thousands separators, at least two
// decimals for currencies; no float on the way.
function money(v, unit) {
  if (v === undefined || v === "") return "–";
  const neg = v.startsWith("-");
  let [i, f = ""] = (neg ? v.slice(1) : v).split(".");
  i = i.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  if (unit !== "requests" && f.length < 2) f = f.padEnd(2, "0");
  return (neg ? "−" : "") + i + (f ? "." + f : "");
}
// pct shows basis points as a percentage rounded down (to 0.1 % below
// 10 %, whole percents above): 99.95 % of a limit is never "100%".
function pct(bp) { return bp >= 1000 ? Math.floor(bp / 100) + "%" : (Math.floor(bp / 10) / 10).toFixed(1) + "%"; }
function dur(ms) {
  const m = Math.round(ms / 60000);
  if (m < 1) return "< 1 min";
  if (m < 60) return m + " min";
  const h = Math.floor(m / 60);
  if (h < 48) return h + " h " + (m % 60) + " min";
  return Math.floor(h / 24) + " d " + (h % 24) + " h";
}
function when(iso) {
  const d = new Date(iso);
  return d.toISOString().replace("T", " ").slice(0, 16) + " UTC";
}
function runsOut(b) {
  const f = b.forecast || {};
  if (b.disabled) return { text: "disabled", soon: true, at: 0, title: "the budget is disabled: every admit naming it is denied (budget_disabled); spendgate budget enable turns it back on" };
  if (f.exhausted) return { text: "exhausted", soon: true, at: 0, title: f.exhausted_by === "denied"
    ? "its latest admit" + (f.denied_amount ? ", of " + money(f.denied_amount, b.unit) + " " + b.unit + "," : "") + " was denied (limit reached) " + when(f.denied_at) + ", and " + money(b.available, b.unit) + " " + b.unit + " available still does not hold it"
    : "nothing is available" };
  if (!f.exhausts_at) return { text: "—", soon: false, at: Infinity };
  const at = Date.parse(f.exhausts_at);
  if (!f.before_reset) return { text: "not before reset", soon: false, at: at };
  const left = at - Date.parse(state.now);
  return { text: "in " + dur(left), soon: left < 24 * 3600e3, at: at };
}
function level(bp) { return bp >= 10000 ? "bad" : bp >= 8000 ? "warn" : ""; }

async function getJSON(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function visible() {
  const q = state.filter.trim().toLowerCase();
  const rows = state.budgets.filter((b) =>
    (!q || b.scope.toLowerCase().includes(q)) &&
    (!state.period || b.period === state.period) &&
    (!state.which || (state.which === "near" ? b.used_bp >= 8000 && b.used_bp < 10000 : b.used_bp >= 10000)));
  const { key, dir } = state.sort;
  const cmp = {
    scope: (a, b) => a.scope.localeCompare(b.scope),
    period: (a, b) => a.period.localeCompare(b.period),
    used_bp: (a, b) => a.used_bp - b.used_bp,
    open: (a, b) => a.open - b.open,
    exposure: (a, b) => cmpDec(a.exposure || "0", b.exposure || "0"),
    per_hour: (a, b) => cmpDec(a.forecast.per_hour || "0", b.forecast.per_hour || "0"),
    exhausts: (a, b) => runsOut(a).at - runsOut(b).at,
    resets: (a, b) => (a.forecast.resets_at || "9").localeCompare(b.forecast.resets_at || "9"),
  }[key] || ((a, b) => cmpDec(a[key], b[key]));
  return rows.sort((a, b) => dir * cmp(a, b) || a.scope.localeCompare(b.scope));
}

function renderBudgets() {
  const tbody = $("budgets").tBodies[0];
  const rows = visible();
  tbody.replaceChildren(...rows.map((b) => {
    const lv = level(b.used_bp);
    const spentW = Math.min(b.spent_bp, 10000) / 100, usedW = Math.min(b.used_bp, 10000) / 100;
    const bar = el("div", { class: "bar" });
    const s = el("span", { class: "s" }); s.style.width = spentW + "%";
    const r = el("span", { class: "r" }); r.style.left = spentW + "%"; r.style.width = Math.max(0, usedW - spentW) + "%";
    bar.append(s, r);
    const ro = runsOut(b);
    const f = b.forecast || {};
    const tr = el("tr", { "data-scope": b.scope, "data-period": b.period, "data-used-bp": b.used_bp },
      el("td", { class: "c-scope", "data-label": "Budget" }, b.tenant ? el("span", { class: "tenant" }, b.tenant + "/") : "", el("span", { class: "kind" }, b.kind), el("span", { class: "scope" }, b.scope.slice((b.tenant ? b.tenant.length + 1 : 0) + b.kind.length + 1))),
      el("td", { class: "c-period", "data-label": "Period" }, el("span", {}, b.period + " ", el("span", { class: "muted instance" }, b.instance))),
      el("td", { class: "c-util", "data-label": "Used" }, el("div", { class: "util " + lv, title: "spent " + pct(b.spent_bp) + " + reserved" }, bar, el("span", { class: "pct" }, pct(b.used_bp)))),
      el("td", { class: "num spent", "data-label": "Spent" }, money(b.spent, b.unit)),
      el("td", { class: "num reserved", "data-label": "Reserved" }, money(b.reserved, b.unit)),
      el("td", { class: "num limit", "data-label": "Limit" }, money(b.limit, b.unit), el("span", { class: "unit" }, b.unit)),
      el("td", { class: "num available", "data-label": "Available" }, money(b.available, b.unit)),
      el("td", { class: "num open", "data-label": "Open" }, b.open),
      el("td", { class: "num exposure", "data-label": "Exposure", title: b.exposure_cap ? "at most " + b.exposure_cap + " " + b.unit + " (the exposure cap)" : "" },
        b.exposure ? money(b.exposure, b.unit) : "—", b.exposure_cap ? el("span", { class: "cap" }, " / " + money(b.exposure_cap, b.unit)) : ""),
      el("td", { class: "num burn", "data-label": "Burn / h" }, f.per_hour ? money(f.per_hour, b.unit) : "—"),
      el("td", { class: "runs-out" + (ro.soon ? " soon" : ""), "data-label": "Runs out", title: ro.title || "" }, ro.text),
      el("td", { class: "resets", "data-label": "Resets", title: f.resets_at ? when(f.resets_at) : "" }, f.resets_local || "never"));
    if (isSelected(b)) tr.classList.add("selected");
    tr.addEventListener("click", () => { state.selected = selection(b); renderBudgets(); loadChart(); });
    return tr;
  }));
  $("empty").hidden = rows.length > 0;
  $("shown").textContent = rows.length + " of " + state.budgets.length + (state.total > state.budgets.length ? " loaded (" + state.total + " budgets; the nearest to their limit first)" : "");
  $("more").hidden = !(state.total > state.budgets.length && state.want < MAX_BUDGETS);
  for (const th of document.querySelectorAll("#budgets th.sortable")) {
    th.classList.toggle("sorted-asc", th.dataset.key === state.sort.key && state.sort.dir > 0);
    th.classList.toggle("sorted-desc", th.dataset.key === state.sort.key && state.sort.dir < 0);
  }
  $("c-budgets").textContent = state.total;
  $("c-near").textContent = state.near;
  $("c-over").textContent = state.over;
}

function renderChart(data) {
  const box = $("chart");
  const W = 960, H = 280, L = 56, R = 20, T = 14, B = 30;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "xMidYMid meet", id: "chart-svg" });
  const b = data.budget;
  $("chart-title").textContent = "· " + b.scope + " per " + b.period + " (" + b.instance + "), limit " + money(b.limit, b.unit) + " " + b.unit;
  const now = Date.parse(data.now);
  const pts = data.points.map((p) => ({ t: Date.parse(p.t), s: p.spent_bp, u: p.used_bp }));
  let x0 = pts.length ? pts[0].t : now - 3600e3;
  if (now - x0 < 60e3) x0 = now - 60e3;
  let x1 = now;
  const f = b.forecast || {};
  const fAt = f.exhausts_at ? Date.parse(f.exhausts_at) : null;
  if (fAt && f.before_reset) x1 = Math.min(Math.max(now, fAt), now + 3 * (now - x0));
  else x1 = now + (now - x0) * 0.15;
  const ymax = Math.max(10000, ...pts.map((p) => p.u)) * 1.08;
  const X = (t) => L + ((t - x0) / (x1 - x0)) * (W - L - R);
  const Y = (bp) => T + (1 - bp / ymax) * (H - T - B);
  for (const g of [0, 2500, 5000, 7500, 10000]) {
    root.append(svg("line", { class: "grid", x1: L, x2: W - R, y1: Y(g), y2: Y(g) }));
    root.append(svg("text", { class: "axis", x: L - 8, y: Y(g) + 4, "text-anchor": "end" }, g / 100 + "%"));
  }
  for (let i = 0; i <= 4; i++) {
    const t = x0 + ((x1 - x0) * i) / 4;
    const d = new Date(t).toISOString();
    const label = x1 - x0 > 2 * 86400e3 ? d.slice(5, 10) + " " + d.slice(11, 16) : d.slice(11, 19);
    root.append(svg("text", { class: "axis", x: X(t), y: H - 8, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" }, label));
  }
  root.append(svg("line", { class: "limit", x1: L, x2: W - R, y1: Y(10000), y2: Y(10000) }));
  root.append(svg("line", { class: "now", x1: X(now), x2: X(now), y1: T, y2: H - B }));
  if (pts.length === 0) {
    root.append(svg("text", { class: "nodata", x: (L + W - R) / 2, y: H / 2, "text-anchor": "middle" }, "No spend recorded in this period yet"));
  } else {
    // Steps: a balance holds its value until the next revision.
    let area = `M ${X(pts[0].t)} ${Y(0)}`, line = "";
    pts.forEach((p, i) => {
      const x = X(p.t);
      area += ` L ${x} ${Y(i ? pts[i - 1].u : 0)} L ${x} ${Y(p.u)}`;
      line += (i ? ` L ${x} ${Y(pts[i - 1].s)} L ${x} ${Y(p.s)}` : `M ${x} ${Y(p.s)}`);
    });
    const last = pts[pts.length - 1];
    area += ` L ${X(now)} ${Y(last.u)} L ${X(now)} ${Y(0)} Z`;
    line += ` L ${X(now)} ${Y(last.s)}`;
    root.append(svg("path", { class: "area", d: area }));
    root.append(svg("path", { class: "spent", d: line, id: "spent-line" }));
    if (fAt && f.before_reset && !f.exhausted && !f.exhausted_by) {
      const xe = Math.min(X(fAt), W - R);
      const ye = fAt <= x1 ? Y(10000) : Y(last.s + ((10000 - last.s) * (x1 - now)) / (fAt - now));
      root.append(svg("path", { class: "fc", d: `M ${X(now)} ${Y(last.s)} L ${xe} ${ye}`, id: "forecast-line" }));
    }
  }
  box.replaceChildren(root);
  let text;
  const resets = f.resets_local ? ` It resets ${f.resets_local} (${when(f.resets_at)}).` : "";
  const idle = f.last_spend_at && now - Date.parse(f.last_spend_at) >= 60e3 ? ` Last spend ${dur(now - Date.parse(f.last_spend_at))} ago.` : "";
  if (f.exhausted && f.exhausted_by === "denied") text = `Exhausted: its latest admit was denied (limit reached) ${when(f.denied_at)}, with ${money(b.available, b.unit)} ${b.unit} available.` + resets;
  else if (f.exhausted) text = "Exhausted: spent + reserved has reached the limit." + resets;
  else if (!f.per_hour) text = "No spend in the last hour: no burn rate, no forecast." + resets;
  else if (f.before_reset) text = `At the current pace of ${money(f.per_hour, b.unit)} ${b.unit}/h this budget runs out ${when(f.exhausts_at)} (in ${dur(Date.parse(f.exhausts_at) - now)}).` + idle + resets;
  else text = `At the current pace of ${money(f.per_hour, b.unit)} ${b.unit}/h this budget lasts until its period resets` + (f.resets_local ? `, ${f.resets_local} (${when(f.resets_at)}).` : ".") + idle;
  $("forecast").textContent = text;
}

function renderDenials(data) {
  const rows = data.denials || [];
  $("c-denials").textContent = rows.length;
  $("no-denials").hidden = rows.length > 0;
  $("denials").tBodies[0].replaceChildren(...rows.slice(0, 50).map((d) => {
    const n = d.denial || {};
    // What the call asked, in its own unit: a unit_mismatch denial's
    // request is in another currency than the budget that refused it.
    const askedUnit = n.reason === "unit_mismatch" || !n.requested ? (d.unit || "USD") : n.unit;
    const asked = n.reason === "unit_mismatch" ? d.amount : (n.requested || d.amount);
    return el("tr", {},
      el("td", { "data-label": "Time" }, when(d.at)),
      el("td", { "data-label": "Request" }, d.request_id),
      el("td", { "data-label": "Blocked by" }, (n.scope || "") + (n.period ? " per " + n.period : "") + (n.unit ? " (" + n.unit + ")" : "")),
      el("td", { "data-label": "Reason" }, el("span", { class: "reason" }, n.reason || "")),
      el("td", { class: "num", "data-label": "Requested" }, money(asked, askedUnit), askedUnit ? el("span", { class: "unit" }, askedUnit) : ""),
      el("td", { class: "num", "data-label": "Spent" }, money(n.spent, n.unit)),
      el("td", { class: "num", "data-label": "Reserved" }, money(n.reserved, n.unit)),
      el("td", { class: "num", "data-label": "Limit" }, money(n.limit, n.unit)),
      el("td", { class: "muted msg", "data-label": "Message", title: n.message || "" }, n.message || ""));
  }));
}

function renderShadow(data) {
  const rows = (data && data.groups) || [];
  $("no-shadow").hidden = rows.length > 0;
  if (data && !data.available) $("no-shadow").textContent = "This replica keeps no report (serve --reports=false): no shadow decisions to show.";
  $("shadow").tBodies[0].replaceChildren(...rows.map((g) => {
    const reasons = Object.entries(g.reasons || {}).sort().map(([r, n]) => el("span", { class: "reason" }, r + " " + n));
    return el("tr", { "data-scope": g.value, "data-mode": g.mode },
      el("td", { class: "c-scope", "data-label": "Scope" }, g.other && !g.value ? "(other)" : g.value),
      el("td", { "data-label": "Mode" }, g.mode),
      el("td", { class: "num admitted", "data-label": "Would admit" }, g.admitted),
      el("td", { class: "num denied", "data-label": "Would deny" }, g.denied),
      el("td", { class: "reasons", "data-label": "Reasons" }, ...reasons),
      el("td", { class: "num amount", "data-label": "Would reserve" }, money(g.amount, g.unit), el("span", { class: "unit" }, g.unit)),
      el("td", { class: "num asked", "data-label": "Denied asked" }, money(g.asked, g.unit), el("span", { class: "unit" }, g.unit)));
  }));
}

async function loadShadow() {
  try { renderShadow(await getJSON("api/shadow")); } catch (e) { console.warn(e.message); }
}

// A budget is its scope, period and unit: a scope may hold a money and a
// requests budget in one period.
function selection(b) { return { scope: b.scope, period: b.period, unit: b.unit }; }
function isSelected(b) {
  const s = state.selected;
  return !!s && s.scope === b.scope && s.period === b.period && s.unit === b.unit;
}

async function loadChart() {
  if (!state.selected) {
    const p = el("p", { class: "empty" }, "No budget yet: define one with spendgate budget put.");
    $("chart").replaceChildren(p);
    $("chart-title").textContent = "";
    $("forecast").textContent = "";
    return;
  }
  const q = new URLSearchParams(state.selected);
  try { renderChart(await getJSON("api/series?" + q)); } catch (e) { console.warn(e.message); }
}

// The page loads the SHOW budgets nearest their limit (in pages of PAGE;
// ?page=N in the address sets PAGE), and SHOW more each time "Show more"
// is pressed, up to MAX_BUDGETS; the counters above the table cover every
// budget. A replica with 100,000 budgets sends the page 500 of them.
const PAGE = Math.min(1000, Math.max(1, parseInt(new URLSearchParams(location.search).get("page"), 10) || 500));
const SHOW = 500;
const MAX_BUDGETS = 5000;
state.want = SHOW;

async function loadBudgets() {
  let first = null, all = [], cursor = "";
  do {
    const page = await getJSON("api/budgets?limit=" + Math.min(PAGE, state.want - all.length) + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
    if (!first) first = page;
    all = all.concat(page.budgets);
    cursor = page.next_cursor || "";
  } while (cursor && all.length < state.want);
  first.budgets = all;
  return first;
}

// One refresh at a time: the next starts REFRESH_MS after the last one
// ended (however long the replica took to answer), or at once when asked
// (tick) if none is under way; a hidden tab waits until it is shown.
const REFRESH_MS = 5000;
let refreshing = false, again = false, timer = 0;
async function tick() {
  clearTimeout(timer);
  if (refreshing) { again = true; return; }
  if (document.hidden) { timer = setTimeout(tick, REFRESH_MS); return; }
  refreshing = true;
  try { await refresh(); } finally {
    refreshing = false;
    if (again) { again = false; tick(); } else timer = setTimeout(tick, REFRESH_MS);
  }
}

async function refresh() {
  try {
    const [b, d] = await Promise.all([loadBudgets(), getJSON("api/denials")]);
    state.budgets = b.budgets; state.now = b.now;
    state.total = b.total; state.near = b.near; state.over = b.over;
    if (!state.selected || !b.budgets.some(isSelected)) {
      state.selected = b.budgets.length ? selection(b.budgets[0]) : null;
    }
    renderBudgets(); renderDenials(d); await loadChart(); await loadShadow();
    $("live").className = "dot on";
    $("updated").textContent = "updated " + new Date(b.now).toISOString().slice(11, 19) + " UTC" + (b.replica ? " · replica " + b.replica : "") + (b.series_ready ? "" : " · loading history…");
    document.body.dataset.loaded = "true";
  } catch (e) {
    $("live").className = "dot off";
    $("updated").textContent = "cannot reach the replica: " + e.message;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  for (const th of document.querySelectorAll("#budgets th.sortable")) {
    th.addEventListener("click", () => {
      const k = th.dataset.key;
      state.sort = state.sort.key === k ? { key: k, dir: -state.sort.dir } : { key: k, dir: k === "scope" || k === "period" || k === "exhausts" || k === "resets" ? 1 : -1 };
      renderBudgets();
    });
  }
  $("filter").addEventListener("input", (e) => { state.filter = e.target.value; renderBudgets(); });
  $("f-period").addEventListener("change", (e) => { state.period = e.target.value; renderBudgets(); });
  $("f-state").addEventListener("change", (e) => { state.which = e.target.value; renderBudgets(); });
  $("more").addEventListener("click", () => { state.want = Math.min(MAX_BUDGETS, state.want + SHOW); tick(); });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) tick(); });
  tick();
});
