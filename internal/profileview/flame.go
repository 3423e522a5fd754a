package profileview

import (
	_ "embed"
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
		Title  string
		Data   template.JS
		Script template.JS
		Notes  []string
	}{title, template.JS(tree), template.JS(FlameScript), p.Notes})
}

// FlameScript is the flame graph renderer (gosleuthFlame), shared by this
// page and the web dashboard, which serves it as /assets/flame.js.
//
//go:embed flame.js
var FlameScript string

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
{{.Script}}
(function(){
"use strict";
const root = JSON.parse(document.getElementById("data").textContent);
const cv = document.getElementById("c"), info = document.getElementById("info"), q = document.getElementById("q");
const fl = gosleuthFlame(cv);
function pct(v){ return (100 * v / root.v).toFixed(2) + "%"; }
cv.addEventListener("mousemove", ev => {
  const n = fl.at(ev);
  info.textContent = n ? n.n + "  " + n.v + " samples, " + pct(n.v) + (n.k === 1 ? "  [kernel]" : "") : " ";
});
cv.addEventListener("click", ev => { const n = fl.at(ev); if (n) fl.zoomTo(n); });
document.getElementById("reset").addEventListener("click", () => fl.zoomTo(null));
q.addEventListener("input", () => {
  const m = fl.search(q.value);
  info.textContent = m < 0 ? " " : "matched " + pct(m) + " of samples";
});
window.addEventListener("resize", fl.draw);
fl.show(root);
})();
</script></body></html>
`))
