// dmutexlab's page. It only draws: every step is taken by the Go server,
// which replays the run from the state in the URL's query.
"use strict";

const $ = (sel) => document.querySelector(sel);
const SVG = "http://www.w3.org/2000/svg";
const colors = {
  request: "#1849a9", reply: "#067647", release: "#7a5af8", grant: "#0e9384",
  token: "#dc6803", privilege: "#dc6803", locked: "#c11574", inquire: "#b54708",
  failed: "#d92d20", relinquish: "#475467", try: "#15b79e", busy: "#98a2b3",
  coordinator: "#0086c9", status: "#4e5ba6",
};

let meta = null;   // algorithms, variants, deliveries
let view = null;   // the last run the server sent
let playing = null; // the play timer
let loading = false;

async function getJSON(path) {
  const res = await fetch(path);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error || res.statusText);
  return body;
}

function showError(msg) {
  const e = $("#error");
  e.textContent = msg || "";
  e.hidden = !msg;
}

// load asks the server for the run of a state and draws it.
async function load(query, push = true) {
  loading = true;
  try {
    const v = await getJSON("/api/run?" + query);
    showError("");
    view = v;
    render();
    const url = "?" + v.query;
    if (push && url !== location.search) history.pushState(null, "", url);
    else history.replaceState(null, "", url);
    document.body.dataset.query = v.query;
    return true;
  } catch (err) {
    showError(err.message);
    stop();
    return false;
  } finally {
    loading = false;
  }
}

function choices() {
  const c = new URLSearchParams(view.query).get("c");
  return c ? c.split(".") : [];
}

// choose appends choices to the current run.
function choose(...cs) {
  const p = new URLSearchParams(view.query);
  p.set("c", choices().concat(cs).join("."));
  return load(p.toString());
}

function el(tag, attrs = {}, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.setAttribute("class", v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  if (text !== undefined) e.textContent = text;
  return e;
}

// The configuration form.

function fillForm(c) {
  $("#alg").value = c.alg;
  $("#n").value = c.n;
  $("#variant").value = c.variant;
  $("#net").value = c.net;
  $("#implicit").checked = c.implicit;
  $("#sets").value = c.sets;
  $("#tree").value = c.tree;
  $("#loss").value = c.loss;
  $("#seed").value = c.seed;
  $("#detector").value = c.detector;
  $("#false").value = c.false;
  $("#recovery").checked = c.recovery;
  showOptions();
}

function showOptions() {
  const a = meta.algorithms.find((x) => x.name === $("#alg").value);
  for (const o of ["implicit", "sets", "tree"]) $("#opt-" + o).hidden = !a || a.option !== o;
  $("#opt-false").hidden = $("#detector").value !== "imperfect";
  $("#opt-recovery").hidden = !a || !a.recovery;
  const v = meta.variants.find((x) => x.name === $("#variant").value);
  // A variant that is a recovery, or acts on suspicions, keeps its own.
  $("#recovery").disabled = !!(v && v.recovery);
  for (const o of $("#detector").options) o.disabled = o.value === "none" && !!v && v.detector !== "none";
  $("#teaches").hidden = !v;
  if (v) $("#teaches").textContent = v.name + ": " + v.teaches;
}

function formQuery() {
  const p = new URLSearchParams();
  if ($("#variant").value) p.set("variant", $("#variant").value);
  p.set("alg", $("#alg").value);
  p.set("n", $("#n").value);
  p.set("seed", $("#seed").value || "0");
  p.set("net", $("#net").value);
  const a = meta.algorithms.find((x) => x.name === $("#alg").value);
  if (a.option === "implicit" && $("#implicit").checked) p.set("implicit", "1");
  if (a.option === "sets" && $("#sets").value) p.set("sets", $("#sets").value);
  if (a.option === "tree" && $("#tree").value) p.set("tree", $("#tree").value);
  if (+$("#loss").value > 0) p.set("loss", $("#loss").value);
  if (a.recovery && $("#recovery").checked) p.set("recovery", "1");
  const d = $("#detector").value;
  if (d !== "none") p.set("detector", d);
  if (d === "imperfect") p.set("false", $("#false").value || "0");
  return p.toString();
}

// Drawing.

function render() {
  const v = view;
  fillForm(v.config);
  renderViolation();
  renderDiagram();
  renderPeers();
  renderInFlight();
  renderCounts();
  renderSteps();
  const T = v.ticks.length;
  let s = `step ${T} · ${v.inFlight.length} in flight · ${v.counts.entries} ${v.counts.entries === 1 ? "entry" : "entries"}`;
  if (v.config.detector === "imperfect") s += ` · false suspicions ${v.falseUsed} of ${v.config.false}`;
  if (v.done) s += " · nothing left to deliver";
  if (v.blocked) s += " · " + v.blocked;
  $("#status").textContent = s;
  $("#back").disabled = T === 0;
  $("#step").disabled = v.done || !!v.violation;
  $("#play").disabled = (v.done || !!v.violation) && !playing;
  $("#share").href = "?" + v.query;
  $("#share").textContent = location.origin + "/?" + v.query;
}

function renderViolation() {
  const b = $("#violation");
  const x = view.violation;
  b.hidden = !x;
  if (!x) return;
  const where = x.tick >= 0 ? `at step ${x.tick + 1}` : `after step ${view.ticks.length}`;
  b.textContent = `Violation ${where}: ${x.message}`;
  if (view.cx > 0) b.textContent += ` (the model checker's counterexample: ${view.cx} steps, highlighted)`;
}

function brokeTick() {
  const x = view.violation;
  if (!x) return -1;
  return x.tick >= 0 ? x.tick : view.ticks.length - 1;
}

function renderDiagram() {
  const v = view, n = v.config.n, T = v.ticks.length;
  const colW = T < 20 ? 60 : 44, left = 54, top = 34, laneH = 74, right = 40;
  const X = (t) => left + t * colW;
  const Y = (p) => top + 14 + p * laneH;
  // Messages in flight end beyond now, side by side per receiver.
  const pendingTo = {};
  for (const m of v.inFlight) (pendingTo[m.to] = pendingTo[m.to] || []).push(m.seq);
  const slot = {};
  let most = 0;
  for (const seqs of Object.values(pendingTo)) {
    seqs.forEach((s, i) => { slot[s] = i; });
    most = Math.max(most, seqs.length);
  }
  const headW = 20;
  const width = Math.max(X(T + 1) + most * headW + right, 600);
  const height = Y(n - 1) + 36;
  const svg = $("#diagram");
  svg.replaceChildren();
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);

  const defs = el("svg:defs");
  for (const [k, c] of Object.entries(colors)) {
    const m = el("svg:marker", { id: "arrow-" + k, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    m.append(el("svg:path", { d: "M0,0 L10,5 L0,10 z", fill: c }));
    defs.append(m);
  }
  svg.append(defs);

  // Columns: the counterexample's steps and the one that broke a promise.
  const broke = brokeTick();
  v.ticks.forEach((t, i) => {
    if (t.cause || i === broke) {
      svg.append(el("svg:rect", { class: i === broke ? "broke" : "cause", x: X(i + 1) - colW / 2, y: top - 4, width: colW, height: height - top }));
    }
    if (T < 40 || (i + 1) % 5 === 0) svg.append(el("svg:text", { class: "tick-label", x: X(i + 1), y: top - 10, "text-anchor": "middle" }, String(i + 1)));
  });

  // Lanes, with crashed peers dashed from their crash on.
  const crashedAt = {};
  for (const e of v.events) if (e.kind === "crash") crashedAt[e.peer] = e.tick;
  for (let p = 0; p < n; p++) {
    const end = crashedAt[p] ?? T + 1;
    svg.append(el("svg:line", { class: "lane", x1: X(0), y1: Y(p), x2: X(end), y2: Y(p) }));
    if (crashedAt[p] !== undefined) {
      svg.append(el("svg:line", { class: "lane crashed", x1: X(end), y1: Y(p), x2: X(T + 1), y2: Y(p) }));
      svg.append(el("svg:text", { class: "mark", x: X(end), y: Y(p) + 6, "text-anchor": "middle", fill: "#d92d20", "font-size": 18 }, "✕"));
    }
    svg.append(el("svg:text", { class: "lane-label", x: 10, y: Y(p) + 5 }, "P" + p));
  }

  // Critical sections.
  const enteredAt = {};
  for (const e of v.events) {
    if (e.kind === "enter") enteredAt[e.peer] = e.tick;
    if (e.kind === "leave" || (e.kind === "crash" && enteredAt[e.peer] !== undefined)) {
      const t0 = enteredAt[e.peer];
      if (t0 !== undefined) {
        svg.append(el("svg:rect", { class: "cs", "data-peer": e.peer, x: X(t0), y: Y(e.peer) - 8, width: Math.max(X(e.tick) - X(t0), 4), height: 16, rx: 3 }));
        delete enteredAt[e.peer];
      }
    }
  }
  for (const [p, t0] of Object.entries(enteredAt)) {
    svg.append(el("svg:rect", { class: "cs open", "data-peer": p, x: X(t0), y: Y(+p) - 8, width: X(T + 1) - X(t0), height: 16, rx: 3 }));
    svg.append(el("svg:text", { class: "mark", x: X(t0) + 4, y: Y(+p) + 24, fill: "#067647" }, "inside"));
  }
  for (const e of v.events) {
    if (e.kind === "request") {
      svg.append(el("svg:path", { d: `M${X(e.tick) - 5},${Y(e.peer) - 18} l10,0 l-5,8 z`, fill: "#b54708" }));
    }
    if (e.kind === "partition" || e.kind === "heal") {
      svg.append(el("svg:line", { x1: X(e.tick), y1: top, x2: X(e.tick), y2: height - 10, stroke: "#d92d20", "stroke-dasharray": "6 3" }));
      // Partitions are labelled below the lanes and heals above, so that
      // a heal right after a partition does not write over it.
      const heal = e.kind === "heal";
      svg.append(el("svg:text", { class: "mark", x: X(e.tick) + 3, y: heal ? top + 2 : height - 4, fill: "#d92d20" }, heal ? "heal" : "partition " + e.text));
    }
  }

  // Suspicions: a dashed pill on the suspecter's lane naming the
  // suspected peer; trusting it again, a solid one.
  for (const e of v.events) {
    if (e.kind !== "suspect" && e.kind !== "trust") continue;
    const sus = e.kind === "suspect";
    const g = el("svg:g", { class: "detector " + (sus ? "suspicion" : "trust"), "data-peer": e.peer, "data-target": e.to, "data-tick": e.tick });
    g.append(el("svg:title", {}, sus ? `P${e.peer} suspects P${e.to}` : `P${e.peer} trusts P${e.to} again`));
    // Just before the tick's mark, so that what the peer sends or does
    // because of it starts clear of the pill.
    g.append(el("svg:rect", { x: X(e.tick) - 33, y: Y(e.peer) - 9, width: 31, height: 18, rx: 9 }));
    g.append(el("svg:text", { x: X(e.tick) - 17.5, y: Y(e.peer) + 4, "text-anchor": "middle" }, (sus ? "?P" : "✓P") + e.to));
    svg.append(g);
  }

  svg.append(el("svg:line", { class: "now", x1: X(T + 1), y1: top - 4, x2: X(T + 1), y2: height - 14 }));
  svg.append(el("svg:text", { class: "tick-label", x: X(T + 1), y: top - 10, "text-anchor": "middle" }, "now"));

  // Messages: from their send to their delivery, loss, or (pending) now.
  const sent = new Map(), ended = new Map();
  for (const e of v.events) {
    if (e.kind === "send") sent.set(e.seq, e);
    if (e.kind === "receive" || e.kind === "lost") ended.set(e.seq, e);
  }
  const deliverable = new Set(v.inFlight.filter((m) => m.deliverable).map((m) => m.seq));
  for (const [seq, s] of sent) {
    const end = ended.get(seq);
    const state = !end ? "pending" : end.kind === "lost" ? "lost" : "delivered";
    const x1 = X(s.tick), y1 = Y(s.from);
    let x2 = end ? X(end.tick) : X(T + 1) + headW / 2 + (slot[seq] || 0) * headW, y2 = Y(s.to);
    if (state === "lost") { x2 = (x1 + x2) / 2 + colW / 4; y2 = (y1 + y2) / 2; }
    const c = colors[s.msg] || "#444";
    const g = el("svg:g", { class: "msg-g " + state, "data-seq": seq, "data-from": s.from, "data-to": s.to, "data-kind": s.msg, "data-state": state });
    g.append(el("svg:title", {}, `m${seq} ${s.text}` + (state === "pending" ? " (in flight)" : "")));
    g.append(el("svg:line", { class: "msg " + state, x1, y1, x2, y2, stroke: c, "marker-end": state === "delivered" ? `url(#arrow-${s.msg})` : "" }));
    const lx = x1 + (x2 - x1) * 0.55, ly = y1 + (y2 - y1) * 0.55;
    g.append(el("svg:text", { x: lx + 3, y: ly - 3, fill: c, "font-size": 10 }, s.msg.slice(0, 3) + (state === "pending" ? " m" + seq : "")));
    if (state === "lost") g.append(el("svg:text", { class: "mark", x: x2, y: y2 + 5, "text-anchor": "middle", fill: "#d92d20", "font-size": 16 }, "✕"));
    if (state === "pending") {
      const ok = deliverable.has(seq);
      const h = el("svg:g", { class: "head" + (ok ? " deliverable" : ""), "data-seq": seq });
      h.append(el("svg:circle", { cx: x2, cy: y2, r: 7, fill: ok ? "#fff" : "#f2f4f7", stroke: c, "stroke-width": 2 }));
      if (ok) h.addEventListener("click", () => choose("d" + seq));
      g.append(h);
    }
    svg.append(g);
  }

  // Keep now in view as the run grows.
  const box = $("#diagram-scroll");
  box.scrollLeft = box.scrollWidth;

  const legend = $("#legend");
  legend.replaceChildren();
  const kinds = new Set([...sent.values()].map((e) => e.msg));
  for (const k of kinds) legend.append(el("span", { style: `--c:${colors[k]}` }, k));
  legend.append(el("span", { style: "--c:#abefc6" }, "critical section"));
  legend.append(el("span", { style: "--c:#b54708" }, "▼ request"));
  if (v.events.some((e) => e.kind === "suspect")) legend.append(el("span", { class: "suspects" }, "?Pj: this lane's peer suspects Pj · ✓Pj: trusts it again"));
}

function renderPeers() {
  const box = $("#peers");
  box.replaceChildren();
  for (const p of view.peers) {
    const card = el("div", { class: "peer " + p.status, "data-peer": p.id, "data-status": p.status });
    const h = el("h3", {}, "P" + p.id + " ");
    h.append(el("span", { class: "badge" }, p.status + (p.pending ? ` (+${p.pending} queued)` : "")));
    card.append(h);
    const t = el("table");
    for (const f of p.fields) {
      const tr = el("tr", { "data-field": f.Name });
      tr.append(el("td", { class: "name" }, f.Name), el("td", { class: "value" }, f.Value));
      t.append(tr);
    }
    card.append(t);
    if (p.suspects.length) card.append(el("p", { class: "suspects" }, "suspects " + p.suspects.map((q) => "P" + q).join(", ")));
    const b = el("div", { class: "buttons" });
    const dead = p.status === "crashed" || !!view.violation;
    b.append(
      el("button", { class: "request", onclick: () => choose("r" + p.id) }, "request"),
      el("button", { class: "leave", onclick: () => choose("l" + p.id) }, "leave"),
      el("button", { class: "crash", onclick: () => choose("c" + p.id) }, "crash"));
    b.querySelector(".request").disabled = dead;
    b.querySelector(".leave").disabled = dead || !p.canLeave;
    b.querySelector(".crash").disabled = dead;
    card.append(b);
    // The detector's choices, only those the World offers now.
    if (!view.violation && (p.suspect.length || p.trust.length)) {
      const d = el("div", { class: "buttons detector" });
      for (const q of p.suspect) d.append(el("button", { class: "suspect", "data-target": q, title: `P${p.id}'s detector starts to suspect P${q}`, onclick: () => choose(`s${p.id}-${q}`) }, "suspect P" + q));
      for (const q of p.trust) d.append(el("button", { class: "trust", "data-target": q, title: `P${p.id}'s detector trusts P${q} again`, onclick: () => choose(`u${p.id}-${q}`) }, "trust P" + q));
      card.append(d);
    }
    box.append(card);
  }
}

function renderInFlight() {
  const ul = $("#inflight");
  ul.replaceChildren();
  for (const m of view.inFlight) {
    const li = el("li", { class: m.deliverable ? "deliverable" : "blocked", "data-seq": m.seq }, `m${m.seq} ${m.text}`);
    if (m.deliverable) li.addEventListener("click", () => choose("d" + m.seq));
    else li.title = "behind an older message on its FIFO channel";
    ul.append(li);
  }
}

function perEntry(x) {
  return view.counts.entries ? (x / view.counts.entries).toFixed(2) : "–";
}

function renderCounts() {
  const c = view.counts;
  const tb = $("#counts tbody");
  tb.replaceChildren();
  for (const k of c.kinds) {
    const tr = el("tr", { "data-kind": k.kind });
    tr.append(el("td", {}, k.kind), el("td", { class: "sent" }, String(k.sent)), el("td", { class: "per" }, perEntry(k.sent)), el("td", {}, k.theory));
    tb.append(tr);
  }
  const tf = $("#counts tfoot");
  tf.replaceChildren();
  const tr = el("tr", { id: "total" });
  tr.append(el("td", {}, "all"), el("td", { class: "sent" }, String(c.messages)), el("td", { class: "per" }, perEntry(c.messages)), el("td", {}, c.theory));
  const te = el("tr", { id: "entries" });
  te.append(el("td", {}, "entries"), el("td", { class: "sent" }, String(c.entries)), el("td"), el("td"));
  tf.append(tr, te);
}

function renderSteps() {
  const ol = $("#steps");
  ol.replaceChildren();
  const broke = brokeTick();
  view.ticks.forEach((t, i) => {
    let cls = t.auto ? "auto" : "";
    if (t.cause) cls += " cause";
    if (i === broke) cls += " broke";
    if (i === view.ticks.length - 1) cls += " current";
    const li = el("li", { class: cls.trim(), "data-tick": i + 1, title: t.id }, t.text);
    li.addEventListener("click", () => load(t.upto));
    ol.append(li);
  });
  const cur = ol.querySelector(".current");
  if (cur) cur.scrollIntoView({ block: "nearest" });
}

// Controls.

function stop() {
  if (playing) clearInterval(playing);
  playing = null;
  $("#play").textContent = "▶ play";
}

function play() {
  if (playing) { stop(); return; }
  $("#play").textContent = "❚❚ pause";
  playing = setInterval(async () => {
    if (loading) return;
    if (!view || view.done || view.violation) { stop(); render(); return; }
    await choose("a");
  }, +$("#speed").value);
}

function back() {
  const T = view.ticks.length;
  if (T === 0) return;
  if (T === 1) {
    const p = new URLSearchParams(view.query);
    p.delete("c"); p.delete("cx");
    load(p.toString());
  } else load(view.ticks[T - 2].upto);
}

async function check() {
  stop();
  $("#status").textContent = "checking every reachable state…";
  try {
    const res = await getJSON("/api/check?" + (view ? view.query : formQuery()));
    const r = res.result;
    if (res.query) {
      await load(res.query);
      $("#status").textContent += ` · checker: ${r.violation.property} found in ${r.states} states`;
    } else {
      const props = [r.safe && "safe", r.deadlockFree && "deadlock-free", r.starvationFree && "starvation-free"].filter(Boolean).join(", ");
      $("#status").textContent = `checker: ${props || "no counterexample"} over ${r.states} states` + (r.complete ? "" : " (search incomplete)");
    }
  } catch (err) {
    showError(err.message);
  }
}

async function init() {
  meta = await getJSON("/api/meta");
  for (const a of meta.algorithms) $("#alg").append(el("option", { value: a.name }, a.name));
  for (const v of meta.variants) $("#variant").append(el("option", { value: v.name }, v.name));
  for (const d of meta.deliveries) $("#net").append(el("option", { value: d }, d));
  for (const d of meta.detectors) $("#detector").append(el("option", { value: d }, d));
  $("#false").max = meta.maxFalse;
  $("#detector").addEventListener("change", showOptions);
  $("#config").addEventListener("submit", (e) => { e.preventDefault(); stop(); load(formQuery()); });
  $("#alg").addEventListener("change", () => {
    const v = meta.variants.find((x) => x.name === $("#variant").value);
    if (v && v.algorithm !== $("#alg").value) $("#variant").value = "";
    showOptions();
  });
  $("#variant").addEventListener("change", () => {
    const v = meta.variants.find((x) => x.name === $("#variant").value);
    if (v) {
      $("#alg").value = v.algorithm; $("#n").value = v.n; $("#net").value = v.net;
      $("#detector").value = v.detector; $("#false").value = v.false; $("#recovery").checked = v.recovery;
    }
    showOptions();
  });
  $("#back").addEventListener("click", back);
  $("#step").addEventListener("click", () => choose("a"));
  $("#play").addEventListener("click", play);
  $("#speed").addEventListener("change", () => { if (playing) { stop(); play(); } });
  $("#all-request").addEventListener("click", () => {
    const idle = view.peers.filter((p) => p.status === "idle").map((p) => "r" + p.id);
    if (idle.length) choose(...idle);
  });
  $("#partition").addEventListener("click", () => {
    const g = $("#groups").value.trim();
    if (!g) { showError("name the groups first, such as 0,1|2"); return; }
    choose("p" + g.split("|").map((s) => s.split(",").map((x) => x.trim()).join("-")).join("_"));
  });
  $("#heal").addEventListener("click", () => choose("h"));
  $("#check").addEventListener("click", check);
  window.addEventListener("popstate", () => load(location.search.slice(1), false));
  const q = location.search.slice(1);
  if (!(await load(q || "alg=ricart-agrawala&n=3&seed=1", false))) {
    // A link that does not replay: say why over the default run.
    const why = $("#error").textContent;
    await load("alg=ricart-agrawala&n=3&seed=1", false);
    showError("this link does not replay, so here is a new run: " + why);
  }
  document.body.dataset.ready = "1";
}

init();
