// gosleuth web: the process list and one process's live charts, findings
// and flame graphs. No framework; every request goes to this page's origin.
(function () {
"use strict";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const pid = params.get("pid");
const nf = (v, d) => v == null ? "–" : v.toFixed(d === undefined ? 1 : d);

function bytes(v) {
  if (v == null) return "–";
  const u = ["B", "K", "M", "G", "T"];
  let i = 0;
  while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 1 : 0)) + u[i];
}
function si(v) {
  if (v == null) return "–";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return a >= 10 || v === Math.round(v) ? v.toFixed(0) : v.toFixed(2);
}
function hms(t) { return new Date(t * 1000).toLocaleTimeString(); }

// A stream that closes while the tab is hidden and reopens when it shows
// again: hidden tabs cost the server (and the target) nothing.
function liveStream(url, handlers) {
  let es = null;
  const open = () => {
    if (es) return;
    es = new EventSource(url());
    for (const k in handlers) es.addEventListener(k, handlers[k]);
  };
  const close = () => { if (es) { es.close(); es = null; } };
  document.addEventListener("visibilitychange", () => document.hidden ? close() : open());
  if (!document.hidden) open();
  return { close: close, reopen: () => { close(); if (!document.hidden) open(); } };
}

// ---------------------------------------------------------------- list

function listPage() {
  $("list").hidden = false;
  $("title").textContent = "processes";
  let table = null, sortCol = "cpu", desc = true;
  const titles = { pid: "PID", user: "USER", state: "S", cpu: "CPU%", usr: "USR%", sys: "SYS%", rss: "RSS", threads: "THR",
    fds: "FDS", fdlimit: "LIMIT", wake: "WAKE/s", nvcsw: "NVCSW/s", runq: "RUNQ%", sysc: "RWSC/s", go: "GO", command: "COMMAND" };
  const text = { user: 1, state: 1, go: 1, command: 1 };
  const head = $("procs").tHead, body = $("procs").tBodies[0];
  const filter = $("filter");
  filter.value = params.get("filter") || "";
  function render() {
    if (!table) return;
    if (table.error) { $("listinfo").textContent = table.error; return; }
    const cols = table.cols, ci = {};
    cols.forEach((c, i) => ci[c] = i);
    if (!head.rows.length) {
      const tr = head.insertRow();
      for (const c of cols) {
        const th = document.createElement("th");
        th.textContent = titles[c] || c;
        if (text[c]) th.className = "l";
        th.onclick = () => { if (sortCol === c) desc = !desc; else { sortCol = c; desc = !text[c] && c !== "pid"; } render(); };
        tr.appendChild(th);
      }
    }
    const f = filter.value.trim().toLowerCase();
    let rows = table.rows;
    if (f) rows = rows.filter(r => String(r[ci.pid]) === f || String(r[ci.command]).toLowerCase().includes(f));
    const k = ci[sortCol];
    rows = rows.slice().sort((a, b) => {
      let x = a[k], y = b[k], c;
      if (x == null) x = -Infinity; if (y == null) y = -Infinity;
      c = x < y ? -1 : x > y ? 1 : a[0] - b[0];
      return desc ? -c : c;
    });
    const frag = document.createDocumentFragment();
    for (const r of rows.slice(0, 500)) {
      const tr = document.createElement("tr");
      tr.onclick = () => { location.href = "/?pid=" + r[ci.pid]; };
      for (const c of cols) {
        const td = document.createElement("td");
        let v = r[ci[c]];
        if (c === "rss") v = bytes(v);
        else if (c === "fdlimit") v = v === -1 ? "inf" : v == null ? "–" : v;
        else if (v == null) v = "–";
        td.textContent = v;
        if (text[c]) td.className = c === "command" ? "l cmd" : "l";
        tr.appendChild(td);
      }
      frag.appendChild(tr);
    }
    body.replaceChildren(frag);
    $("listinfo").textContent = rows.length + " of " + table.rows.length + " processes" + (table.all_users ? "" : " (yours; run as root to see every user's)") + ", " + hms(table.time);
  }
  filter.addEventListener("input", render);
  liveStream(() => "/api/procs/events", { procs: (ev) => { table = JSON.parse(ev.data); render(); } });
}

// ---------------------------------------------------------------- charts

const palette = ["#3866c7", "#e0642f", "#2e9e5b", "#9b4dca", "#c7a938", "#d0468c", "#4bb3c2", "#7a7a7a", "#8c564b"];

// The panels: which series each draws. Series name their column on the
// wire; "go" panels need a runtime source.
const panels = [
  { id: "cpu", title: "CPU (% of one core)", series: [["usr", "user"], ["sys", "system"]], fmt: (v) => nf(v) + "%", fill: true },
  { id: "wake", title: "wake-ups and involuntary switches /s", series: [["wake", "wake-ups (voluntary)"], ["invol", "involuntary"]], fmt: si },
  { id: "threads", title: "OS threads vs GOMAXPROCS", series: [["threads", "threads"], ["gomaxprocs", "GOMAXPROCS"]], fmt: si },
  { id: "rss", title: "resident memory", series: [["rss", "RSS"]], fmt: bytes, fill: true },
  { id: "fds", title: "open descriptors vs limit", series: [["fds", "fds"], ["fdlimit", "soft limit"]], fmt: si },
  { id: "sysc", title: "syscalls /s", series: [["sysr", "read-class (approx.)"], ["sysw", "write-class (approx.)"]], fmt: si, sys: true },
  { id: "gc", title: "GC share of busy CPU (%)", series: [["gc_share", "GC"]], fmt: (v) => nf(v) + "%", go: true, fill: true },
  { id: "heap", title: "heap vs goal", series: [["heap_alloc", "heap (live + unswept)"], ["heap_live", "live at last GC"], ["heap_goal", "goal"]], fmt: bytes, go: true },
  { id: "goroutines", title: "goroutines", series: [["goroutines", "goroutines"]], fmt: si, go: true },
  { id: "sched", title: "scheduling latency p99 (ms) and run-queue wait", series: [["sched_p99", "Go sched p99 ms"], ["runq", "OS run-queue wait %"]], fmt: (v) => nf(v, 2) },
];
const exactSeries = [["x_futex", "futex"], ["x_poll", "epoll/poll"], ["x_sleep", "sleep/yield"], ["x_read", "read"], ["x_write", "write"], ["x_open", "open/close/stat"], ["x_mem", "mmap/munmap"], ["x_other", "other"]];

function procPage() {
  $("proc").hidden = false;
  $("title").textContent = "pid " + pid;
  let data = null;      // columns by name: arrays of numbers
  let names = [];       // column order on the wire
  let seq = 0, cap = 3600, st = null;
  const charts = [];    // {panel, u, el}
  let raf = 0, stream = null;

  function marksPlugin() {
    return { hooks: { draw: [(u) => {
      if (!st || !st.findings.length) return;
      const ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
      ctx.save();
      st.findings.forEach((f, i) => {
        const x = u.valToPos(f.began, "x", true);
        if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
        ctx.strokeStyle = f.severity === "critical" ? "#c62828" : f.severity === "warn" ? "#e08a00" : "#3866c7";
        ctx.setLineDash([4, 3]); ctx.lineWidth = 1.5 * devicePixelRatio;
        ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
        ctx.setLineDash([]); ctx.fillStyle = ctx.strokeStyle;
        ctx.font = (11 * devicePixelRatio) + "px sans-serif";
        ctx.fillText(String(i + 1), x + 3 * devicePixelRatio, top + 12 * devicePixelRatio);
      });
      if (st.exited && st.exited_at) {
        const x = u.valToPos(st.exited_at, "x", true);
        ctx.strokeStyle = "#000"; ctx.lineWidth = 2 * devicePixelRatio;
        ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
      }
      ctx.restore();
    }] } };
  }

  function seriesOf(p) {
    if (p.sys && st && st.syscalls.mode === "exact") return exactSeries;
    return p.series;
  }

  function build() {
    for (const c of charts) c.u.destroy();
    charts.length = 0;
    const box = $("charts");
    box.replaceChildren();
    for (const p of panels) {
      const el = document.createElement("div");
      el.className = "panel";
      el.id = "panel-" + p.id;
      const h = document.createElement("h3");
      h.textContent = p.sys && st.syscalls.mode === "exact" ? "syscalls /s, exact by kind" : p.title;
      el.appendChild(h);
      const why = document.createElement("div");
      why.className = "why";
      if (p.go && !st.is_go) why.textContent = "not a Go program";
      else if (p.go && !st.runtime.from) why.textContent = st.runtime.why || "looking for a runtime source…";
      else if (p.sys) why.textContent = st.syscalls.mode === "exact" ? "exact: " + st.syscalls.mechanism : "approximate: /proc/PID/io syscr and syscw count read- and write-class calls only; tick \"exact syscalls\" for counts by kind";
      el.appendChild(why);
      box.appendChild(el);
      if (p.go && !st.is_go) continue;
      const ser = seriesOf(p);
      const opts = {
        width: Math.max(300, el.clientWidth - 16), height: 170,
        cursor: { drag: { x: true, y: false } },
        scales: { x: { time: true } },
        axes: [{}, { size: 56, values: (u, vals) => vals.map(p.fmt) }],
        series: [{}].concat(ser.map((s, i) => ({
          label: s[1], stroke: palette[i % palette.length], width: 1.5,
          fill: p.fill && i === 0 ? palette[i] + "22" : undefined,
          value: (u, v) => p.fmt(v), spanGaps: false,
        }))),
        plugins: [marksPlugin()],
      };
      const u = new uPlot(opts, chartData(ser), el);
      charts.push({ p: p, u: u, el: el, ser: ser });
    }
  }

  function chartData(ser) {
    return [data.t].concat(ser.map(s => data[s[0]] || []));
  }

  function append(batch) {
    const cols = batch.cols;
    names.forEach((n, i) => { const a = data[n], c = cols[i]; for (let j = 0; j < c.length; j++) a.push(c[j]); });
    seq = batch.seq;
    // Keep what the server keeps; trim in steps so arrays are not
    // shifted every second.
    if (data.t.length > cap + 60) {
      const cut = data.t.length - cap;
      for (const n of names) data[n].splice(0, cut);
    }
  }

  function redraw() {
    raf = 0;
    for (const c of charts) c.u.setData(chartData(c.ser));
  }
  function schedule() { if (!raf) raf = requestAnimationFrame(redraw); }

  function showState(s) {
    const rebuild = !st || st.syscalls.mode !== s.syscalls.mode || st.runtime.from !== s.runtime.from || st.is_go !== s.is_go;
    st = s;
    $("title").textContent = "pid " + s.pid + " " + s.comm + (s.go_version ? " (" + s.go_version + ")" : "");
    // The container, as the other commands name it, and the PID the
    // program has inside its own namespace.
    const ctr = $("ctr");
    const inner = s.nspid ? "PID " + s.nspid + " in its namespace" : "";
    ctr.hidden = !s.container_text && !inner;
    ctr.textContent = [s.container_text ? "container " + s.container_text : "", inner].filter(Boolean).join(", ");
    ctr.title = s.container ? s.container.runtime + " container " + (s.container.id || "") + " (cgroup " + s.container.dir + (s.container.meta_from ? "; names from " + s.container.meta_from : "") + ")" : "";
    $("cmd").textContent = s.cmdline;
    $("cmd").title = s.cmdline;
    document.title = "gosleuth: " + s.pid + " " + s.comm;
    $("status").textContent = s.exited ? "exited" : s.sampling ? "live, " + s.viewers + " viewer" + (s.viewers === 1 ? "" : "s") : "paused";
    const b = $("banner");
    if (s.exited) { b.hidden = false; b.textContent = "The process exited at " + hms(s.exited_at) + ". Its history is kept below."; }
    else if (s.sampler_error) { b.hidden = false; b.textContent = "sampler: " + s.sampler_error; }
    else b.hidden = true;
    const ex = $("exact");
    ex.checked = s.syscalls.mode === "exact";
    ex.disabled = !s.syscalls.can_exact || s.exited;
    $("syswhy").hidden = !s.syscalls.why;
    $("syswhy").textContent = s.syscalls.why ? "exact syscalls: " + s.syscalls.why : "";
    $("prof").disabled = s.exited;
    showFindings(s);
    if (rebuild) build(); else for (const c of charts) c.u.redraw(false);
    if (s.exited && stream) { stream.close(); }
  }

  function showFindings(s) {
    const box = $("findings");
    const frag = document.createDocumentFragment();
    const h = document.createElement("div");
    h.className = "note";
    h.textContent = s.findings.length
      ? "The doctor's findings over " + (s.eval_to ? Math.round(s.eval_to - s.eval_from) + " s" : "the history") + " (numbered marks on the charts show where each began):"
      : s.eval_to ? "No findings over " + Math.round(s.eval_to - s.eval_from) + " s of history." : "The doctor looks once a few seconds have been recorded.";
    if (s.cpu_note) h.textContent += " " + s.cpu_note + ".";
    frag.appendChild(h);
    s.findings.forEach((f, i) => {
      const d = document.createElement("div");
      d.className = "finding " + f.severity;
      const t = document.createElement("h4");
      const m = document.createElement("span");
      m.className = "mark"; m.textContent = i + 1;
      t.append(m, " " + f.severity + ": " + f.title + " ");
      const when = document.createElement("small");
      when.textContent = "(since " + hms(f.began) + ", " + f.confidence + " confidence, " + f.id + ")";
      t.appendChild(when);
      const ev = document.createElement("div");
      ev.className = "ev";
      ev.textContent = Object.entries(f.evidence).map(([k, v]) => k + "=" + v).join("  ");
      const cause = document.createElement("p");
      cause.textContent = "Cause: " + f.cause;
      const fix = document.createElement("p");
      fix.textContent = "Fix: " + f.fix;
      d.append(t, ev, cause, fix);
      frag.appendChild(d);
    });
    box.replaceChildren(frag);
  }

  function connect() {
    stream = liveStream(() => "/api/events?pid=" + pid + "&since=" + seq, {
      points: (ev) => { append(JSON.parse(ev.data)); schedule(); },
      state: (ev) => showState(JSON.parse(ev.data)),
    });
  }

  // For tests and the bench: what the page holds, and when the first
  // chart was drawn (ms after navigation started).
  window.gosleuthDebug = { points: () => data ? data.t.length : 0, seq: () => seq, firstChartMs: null };
  fetch("/api/history?pid=" + encodeURIComponent(pid)).then(async (r) => {
    if (!r.ok) throw new Error(await r.text());
    return r.json();
  }).then((h) => {
    names = h.series.map(s => s.name);
    data = {};
    names.forEach((n, i) => { data[n] = h.data.cols[i]; });
    seq = h.data.seq;
    cap = h.state.capacity;
    showState(h.state);
    // uPlot draws in a microtask; the next frame has the charts on screen.
    requestAnimationFrame(() => { window.gosleuthDebug.firstChartMs = performance.now(); });
    if (!h.state.exited) connect();
  }).catch((e) => {
    const b = $("banner");
    b.hidden = false;
    b.textContent = String(e.message || e);
  });

  $("exact").addEventListener("change", (ev) => {
    // A state change: POST (the server refuses it on GET and from other origins).
    fetch("/api/syscalls?pid=" + pid + "&mode=" + (ev.target.checked ? "exact" : "proc"), { method: "POST" }).then(async (r) => {
      if (!r.ok) { $("syswhy").hidden = false; $("syswhy").textContent = await r.text(); ev.target.checked = false; }
    });
  });
  window.addEventListener("resize", () => { for (const c of charts) c.u.setSize({ width: Math.max(300, c.el.clientWidth - 16), height: 170 }); });
  flameSetup();
}

// ---------------------------------------------------------------- flame graphs

function flameSetup() {
  const runs = [];
  let cur = null, diff = null;
  const cv = $("fc"), info = $("finfo");
  const fl = gosleuthFlame(cv); // /assets/flame.js, shared with gosleuth profile's page

  $("prof").addEventListener("click", () => {
    const btn = $("prof");
    btn.disabled = true;
    btn.textContent = "profiling…";
    fetch("/api/profile?pid=" + pid + "&seconds=10", { method: "POST" }).then(async (r) => {
      if (!r.ok) throw new Error(await r.text());
      return r.json();
    }).then((run) => {
      runs.push(run);
      const o = document.createElement("option");
      o.value = String(runs.length - 1);
      o.textContent = "diff against profile " + run.id + " (" + hms(Date.parse(run.start) / 1000) + ")";
      show(run);
      $("diffbase").appendChild(o);
    }).catch((e) => {
      $("flame").hidden = false;
      $("flamenotes").textContent = "profile: " + (e.message || e);
    }).finally(() => { btn.disabled = false; btn.textContent = "profile 10 s"; });
  });
  $("diffbase").addEventListener("change", (ev) => {
    const i = ev.target.value;
    diff = i === "" ? null : runs[+i];
    show(cur);
  });
  $("reset").addEventListener("click", () => fl.zoomTo(null));
  $("q").addEventListener("input", () => fl.search($("q").value));
  window.addEventListener("resize", () => { if (cur) fl.draw(); });
  cv.addEventListener("mousemove", (ev) => {
    const n = fl.at(ev);
    if (!n) { info.textContent = " "; return; }
    let s = n.n + "  " + n.v + " samples, " + (100 * n.v / cur.flame.v).toFixed(2) + "%" + (n.k === 1 ? "  [kernel]" : "");
    if (n.dd !== undefined) s += "  change " + (n.dd >= 0 ? "+" : "") + (100 * n.dd).toFixed(2) + " points of share";
    info.textContent = s;
  });
  cv.addEventListener("click", (ev) => { const n = fl.at(ev); if (n) fl.zoomTo(n); });

  function show(run) {
    cur = run;
    $("flame").hidden = false;
    $("flametitle").textContent = "profile " + run.id + ": " + run.seconds.toFixed(1) + " s at " + run.hz + " Hz, " + run.samples + " samples" + (diff && diff !== run ? " (red: larger share than in profile " + diff.id + ", blue: smaller)" : "");
    $("flamenotes").textContent = run.notes.join("; ");
    $("dl").href = "/api/profile.pb.gz?id=" + run.id;
    // Each frame's change of share against the diff's same path.
    const base = diff && diff !== run ? index(diff.flame) : null;
    (function walk(n, key) {
      const k = key + "\u0000" + n.k + n.n;
      n.dd = base ? n.v / run.flame.v - (base.get(k) || 0) / diff.flame.v : undefined;
      for (const c of (n.c || [])) walk(c, k);
    })(run.flame, "");
    fl.show(run.flame);
  }
  function index(root) {
    const m = new Map();
    (function walk(n, key) {
      const k = key + "\u0000" + n.k + n.n;
      m.set(k, (m.get(k) || 0) + n.v);
      for (const c of (n.c || [])) walk(c, k);
    })(root, "");
    return m;
  }
}

if (pid) procPage(); else listPage();
})();
