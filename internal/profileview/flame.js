// gosleuthFlame draws a flame graph on a canvas: the tree is
// {n: name, v: samples, k: kind (0 Go/user, 1 kernel, 2 other native),
// c: children}, and a node may carry dd, its change of share against
// another profile (red larger, blue smaller). Shared by the page of
// "gosleuth profile --flame" and the "gosleuth web" dashboard.
function gosleuthFlame(cv) {
  "use strict";
  const H = 17, cx = cv.getContext("2d");
  let root = null, zoom = null, depth = 0, boxes = [], re = null;
  function hue(s) { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0; return h; }
  function color(n) {
    if (re && re.test(n.n)) return "#d040d0";
    if (n.dd !== undefined) {
      const a = Math.min(1, Math.abs(n.dd) * 10);
      return n.dd >= 0 ? "rgb(255," + Math.round(230 - 170 * a) + "," + Math.round(230 - 170 * a) + ")" : "rgb(" + Math.round(230 - 170 * a) + "," + Math.round(230 - 120 * a) + ",255)";
    }
    const v = hue(n.n) % 30;
    if (n.k === 1) return "hsl(" + (200 + v / 3) + ",60%," + (55 + v / 3) + "%)";
    if (n.k === 2) return "hsl(" + (100 + v / 2) + ",40%," + (55 + v / 3) + "%)";
    return "hsl(" + (15 + v) + ",80%," + (55 + v / 4) + "%)";
  }
  function layout(r) {
    depth = 0;
    (function walk(n, d, x, parent) {
      n.d = d; n.x = x; n.p = parent; depth = Math.max(depth, d + 1);
      let c0 = x;
      for (const c of (n.c || [])) { walk(c, d + 1, c0, n); c0 += c.v; }
    })(r, 0, 0, null);
    root = zoom = r;
  }
  function draw() {
    if (!root) return;
    const W = cv.clientWidth, dpr = window.devicePixelRatio || 1;
    cv.width = W * dpr; cv.height = depth * H * dpr; cv.style.height = depth * H + "px";
    cx.setTransform(dpr, 0, 0, dpr, 0, 0);
    cx.font = "11px monospace"; cx.textBaseline = "middle";
    boxes = [];
    const scale = W / zoom.v, x0 = zoom.x;
    for (let a = zoom.p; a; a = a.p) box(a, 0, W, true);
    (function rec(n) {
      const x = (n.x - x0) * scale, w = n.v * scale;
      if (w < 0.5) return;
      box(n, x, w, false);
      for (const c of (n.c || [])) rec(c);
    })(zoom);
  }
  function box(n, x, w, faded) {
    const y = n.d * H;
    cx.globalAlpha = faded ? 0.5 : 1;
    cx.fillStyle = color(n); cx.fillRect(x, y, Math.max(w - 1, 0.5), H - 1);
    if (w > 30) {
      cx.fillStyle = "#000";
      const max = Math.floor((w - 6) / 6.6);
      cx.fillText(n.n.length > max ? n.n.slice(0, Math.max(max - 2, 0)) + ".." : n.n, x + 3, y + H / 2);
    }
    boxes.push([x, y, w, n]);
    cx.globalAlpha = 1;
  }
  // at is the node under a mouse event, null when none.
  function at(ev) {
    const r = cv.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    for (let i = boxes.length - 1; i >= 0; i--) {
      const b = boxes[i];
      if (x >= b[0] && x < b[0] + b[2] && y >= b[1] && y < b[1] + H) return b[3];
    }
    return null;
  }
  // search highlights the frames whose name matches the regexp q and
  // returns the samples under them (-1 when q is empty or invalid).
  function search(q) {
    try { re = q ? new RegExp(q) : null; } catch (e) { re = null; }
    draw();
    if (!re || !root) return -1;
    let m = 0;
    (function rec(n) { if (re.test(n.n)) { m += n.v; return; } for (const c of (n.c || [])) rec(c); })(root);
    return m;
  }
  return {
    show(r) { layout(r); draw(); },
    draw: draw,
    at: at,
    zoomTo(n) { zoom = n || root; draw(); },
    search: search,
  };
}
