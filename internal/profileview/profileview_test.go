package profileview

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gosleuth/gosleuth/internal/stacks"
	"github.com/gosleuth/gosleuth/internal/testenv"
)

// fakeProfile is a small symbolized profile: two threads, Go and kernel
// frames.
func fakeProfile() *stacks.Profile {
	raw := &stacks.Raw{PID: 42, Exe: "/bin/x", Hz: 99, Period: time.Second / 99,
		Start: time.Unix(0, 0), End: time.Unix(2, 0), Threads: map[int]string{1: "x", 2: "x"}, Samples: 6}
	p := &stacks.Profile{Raw: raw}
	add := func(tid int, mode stacks.Mode, class stacks.Class, n int64, frames ...stacks.SymFrame) {
		p.Stacks = append(p.Stacks, stacks.SymStack{Stack: &stacks.Stack{TID: tid, Mode: mode, Count: n}, Frames: frames, Class: class})
	}
	g := func(name string) stacks.SymFrame {
		return stacks.SymFrame{Frame: stacks.Frame{Func: name, File: "x.go", Line: 1}, Map: 0}
	}
	k := func(name string) stacks.SymFrame {
		return stacks.SymFrame{Frame: stacks.Frame{Func: name}, Kernel: true, Map: 1}
	}
	add(1, stacks.ModeUser, stacks.ClassUser, 3, g("main.work"), g("main.main"), g("runtime.main"))
	add(2, stacks.ModeKernel, "syscall getppid", 2, k("__task_pid_nr_ns"), k("__x64_sys_getppid"), k("do_syscall_64"), g("syscall.rawSyscallNoError"), g("syscall.Getppid"), g("main.main"))
	add(2, stacks.ModeUser, stacks.ClassGCMark, 1, g("runtime.gcDrain"), g("runtime.gcBgMarkWorker"))
	return p
}

func TestFoldedKernelSuffix(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFolded(&b, fakeProfile()); err != nil {
		t.Fatal(err)
	}
	want := "x;main.main;syscall.Getppid;syscall.rawSyscallNoError;do_syscall_64_[k];__x64_sys_getppid_[k];__task_pid_nr_ns_[k] 2\n" +
		"x;runtime.gcBgMarkWorker;runtime.gcDrain 1\n" +
		"x;runtime.main;main.main;main.work 3\n"
	if b.String() != want {
		t.Errorf("folded:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestFlamePageRuns runs the page's script in node with a stub DOM: it
// must draw, zoom on click and report the share matched by a search.
func TestFlamePageRuns(t *testing.T) {
	testenv.Require(t, testenv.Node)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteFlameHTML(&b, fakeProfile()); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("the page refers to the network")
	}
	m := regexp.MustCompile(`(?s)<script id="data" type="application/json">(.*?)</script>\s*<script>(.*?)</script>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no data and script blocks in the page")
	}
	harness := `
const listeners = {};
const el = (id) => ({
  id, textContent: id === "data" ? DATA : "", value: "", clientWidth: 1000, style: {},
  addEventListener(ev, fn) { listeners[id + ":" + ev] = fn; },
  getBoundingClientRect() { return {left: 0, top: 0}; },
  getContext() { return ctx; },
});
const texts = [], fills = [];
const ctx = { setTransform(){}, fillRect(x, y, w, h) { fills.push([this.fillStyle, x, y, w]); }, fillText(s) { texts.push(s); } };
const els = {};
globalThis.document = { getElementById(id) { return els[id] || (els[id] = el(id)); } };
globalThis.window = { devicePixelRatio: 1, addEventListener() {} };
` + "const DATA = " + "`" + m[1] + "`;\n" + m[2] + `
if (!texts.some(s => s.startsWith("main.main"))) throw new Error("main.main not drawn: " + texts);
if (!fills.some(f => f[0].startsWith("hsl(2"))) throw new Error("no kernel-coloured frame");
const q = els["q"]; q.value = "getppid";
listeners["q:input"]();
if (!/matched 33.33% of samples/.test(els["info"].textContent)) throw new Error("search: " + els["info"].textContent);
fills.length = 0;
listeners["c:click"]({clientX: 5, clientY: 17 * 2 + 3});
const wide = fills.filter(f => f[3] > 900).length;
if (wide < 3) throw new Error("zoom did not widen the clicked frame: " + JSON.stringify(fills));
console.log("ok");
`
	js := filepath.Join(t.TempDir(), "page.js")
	if err := os.WriteFile(js, []byte(harness), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, js).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Errorf("page script: %v\n%s", err, out)
	}
}

// TestEmptySummaryJSON: a run without samples still gives lists, not
// nulls, to JSON readers.
func TestEmptySummaryJSON(t *testing.T) {
	p := &stacks.Profile{Raw: &stacks.Raw{Period: time.Second / 99, Threads: map[int]string{}}}
	var b bytes.Buffer
	if err := WriteSummaryJSON(&b, p.Summarize(5), Target{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"top": []`, `"top_cum": []`, `"classes": {}`, `"coverage": null`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b.String())
		}
	}
}
