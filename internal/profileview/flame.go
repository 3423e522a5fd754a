package profileview

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"sort"

	"github.com/gosleuth/gosleuth/internal/stacks"
)

// flameNode is one frame of the flame graph tree as the page's script
// reads it: name, value (samples), kind (0 Go/user, 1 kernel, 2 other
// native or unknown) and children.
type flameNode struct {
	Name     string       `json:"n"`
	Value    int64        `json:"v"`
	Kind     int          `json:"k,omitempty"`
	Children []*flameNode `json:"c,omitempty"`
	index    map[string]*flameNode
}

func (n *flameNode) child(name string, kind int) *flameNode {
	key := fmt.Sprintf("%d\x00%s", kind, name)
	if c, ok := n.index[key]; ok {
		return c
	}
	if n.index == nil {
		n.index = map[string]*flameNode{}
	}
	c := &flameNode{Name: name, Kind: kind}
	n.index[key] = c
	n.Children = append(n.Children, c)
	return c
}

func (n *flameNode) sort() {
	sort.Slice(n.Children, func(i, j int) bool { return n.Children[i].Name < n.Children[j].Name })
	for _, c := range n.Children {
		c.sort()
	}
}

// flameTree builds the tree: all, then the thread, then frames root first.
func flameTree(p *stacks.Profile) *flameNode {
	root := &flameNode{Name: "all"}
	all := append(append([]stacks.SymStack(nil), p.Stacks...), p.OffCPU...)
	for _, st := range all {
		w := st.Count
		n := root
		if st.OffCPU {
			w = p.OffWeight(st)
			n = root.child(stacks.OffCPURoot, 2)
			n.Value += w
		}
		root.Value += w
		n = n.child(stacks.ThreadRoot(st.TID, p.Threads[st.TID]), 2)
		n.Value += w
		for i := len(st.Frames) - 1; i >= 0; i-- {
			f := st.Frames[i]
			kind := 0
			switch {
			case f.Kernel:
				kind = 1
			case f.Unknown || (f.File == "" && !f.Inlined):
				kind = 2
			}
			n = n.child(f.Func, kind)
			n.Value += w
		}
	}
	root.sort()
	return root
}

// FlameJSON returns the flame graph's tree as JSON, as the flame graph
// pages read it: {"n": name, "v": samples, "k": kind, "c": [children]},
// kind 0 for Go and other user code, 1 for kernel frames, 2 for other
// native or unknown frames; the root is "all", then threads, then frames
// from the outermost in, siblings sorted by name.
func FlameJSON(p *stacks.Profile) ([]byte, error) {
	tree, err := json.Marshal(flameTree(p))
	if err != nil {
		return nil, fmt.Errorf("encode flame graph: %w", err)
	}
	return tree, nil
}

// WriteFlameHTML writes a self-contained flame graph page (no network
// access needed to view it): click a frame to zoom, type in the search box
// to highlight matching frames and see their share; kernel frames are blue,
// Go frames warm, other native or unknown frames green.
func WriteFlameHTML(w io.Writer, p *stacks.Profile) error {
	tree, err := FlameJSON(p)
	if err != nil {
		return err
	}
	title := fmt.Sprintf("gosleuth profile: pid %d %s, %.1fs at %d Hz, %d samples",
		p.PID, p.Exe, p.End.Sub(p.Start).Seconds(), p.Hz, p.Samples)
	return flamePage.Execute(w, struct {
		Title string
		Data  template.JS
		Notes []string
	}{title, template.JS(tree), p.Notes})
}

var flamePage = template.Must(template.New("flame").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:13px sans-serif;margin:8px}
#bar{display:flex;gap:8px;align-items:center;margin-bottom:6px}
#info{font-family:monospace;white-space:pre;min-height:1.3em}
canvas{display:block;width:100%}
.legend span{display:inline-block;width:10px;height:10px;margin:0 3px 0 8px}
</style></head><body>
<div id="bar"><b>{{.Title}}</b>
<input id="q" placeholder="search (regexp)" size="30"> <button id="reset">reset zoom</button>
<span class="legend"><span style="background:#e8733b"></span>Go<span style="background:#5b9bd5"></span>kernel<span style="background:#7cbf6a"></span>other native / unknown</span></div>
{{range .Notes}}<div>note: {{.}}</div>{{end}}
<div id="info"> </div>
<canvas id="c"></canvas>
<script id="data" type="application/json">{{.Data}}</script>
<script>
(function(){
"use strict";
const root = JSON.parse(document.getElementById("data").textContent);
const H = 17, cv = document.getElementById("c"), cx = cv.getContext("2d");
const info = document.getElementById("info"), q = document.getElementById("q");
let depth = 0;
(function walk(n, d, x, parent){
  n.d = d; n.x = x; n.p = parent; depth = Math.max(depth, d + 1);
  let cx0 = x;
  for (const c of (n.c || [])) { walk(c, d + 1, cx0, n); cx0 += c.v; }
})(root, 0, 0, null);
let zoom = root, re = null;
function hue(s){ let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0; return h; }
function color(n){
  if (re && re.test(n.n)) return "#d040d0";
  const v = hue(n.n) % 30;
  if (n.k === 1) return "hsl(" + (200 + v / 3) + ",60%," + (55 + v / 3) + "%)";
  if (n.k === 2) return "hsl(" + (100 + v / 2) + ",40%," + (55 + v / 3) + "%)";
  return "hsl(" + (15 + v) + ",80%," + (55 + v / 4) + "%)";
}
let boxes = [];
function draw(){
  const W = cv.clientWidth, dpr = window.devicePixelRatio || 1;
  cv.width = W * dpr; cv.height = depth * H * dpr; cv.style.height = depth * H + "px";
  cx.setTransform(dpr, 0, 0, dpr, 0, 0);
  cx.font = "11px monospace"; cx.textBaseline = "middle";
  boxes = [];
  const scale = W / zoom.v, x0 = zoom.x;
  for (let a = zoom.p; a; a = a.p) box(a, 0, W, true);
  (function rec(n){
    const x = (n.x - x0) * scale, w = n.v * scale;
    if (w < 0.5) return;
    box(n, x, w, false);
    for (const c of (n.c || [])) rec(c);
  })(zoom);
}
function box(n, x, w, faded){
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
function at(ev){
  const r = cv.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
  for (let i = boxes.length - 1; i >= 0; i--) {
    const b = boxes[i];
    if (x >= b[0] && x < b[0] + b[2] && y >= b[1] && y < b[1] + H) return b[3];
  }
  return null;
}
function pct(v){ return (100 * v / root.v).toFixed(2) + "%"; }
cv.addEventListener("mousemove", ev => {
  const n = at(ev);
  info.textContent = n ? n.n + "  " + n.v + " samples, " + pct(n.v) + (n.k === 1 ? "  [kernel]" : "") : " ";
});
cv.addEventListener("click", ev => { const n = at(ev); if (n) { zoom = n; draw(); } });
document.getElementById("reset").addEventListener("click", () => { zoom = root; draw(); });
q.addEventListener("input", () => {
  try { re = q.value ? new RegExp(q.value) : null; } catch (e) { re = null; }
  draw();
  if (!re) { info.textContent = " "; return; }
  let m = 0;
  (function rec(n){ if (re.test(n.n)) { m += n.v; return; } for (const c of (n.c || [])) rec(c); })(root);
  info.textContent = "matched " + pct(m) + " of samples";
});
window.addEventListener("resize", draw);
draw();
})();
</script></body></html>
`))
