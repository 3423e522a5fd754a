package top

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gdamore/tcell/v2"
)

const helpLine = "q quit  s/S sort  r reverse  t tree  H threads  K kernel  / filter  Enter focus  Esc clear  ↑↓ PgUp PgDn"

// tui is the interactive screen. Everything runs on the goroutine of
// runTUI: tcell delivers input events over a channel, so the collector and
// the UI need no locks.
type tui struct {
	cfg       *Config
	s         *sampler
	scr       tcell.Screen
	rows      []Row
	cells     []string
	top       int // first row shown
	cursor    int // selected row
	editing   bool
	filterBuf []rune
	ready     bool // rates have been computed at least once
	exited    string
}

func runTUI(ctx context.Context, cfg *Config, s *sampler, stderr io.Writer) (err error) {
	scr, err := tcell.NewScreen()
	if err != nil {
		return fmt.Errorf("open terminal: %w", err)
	}
	if err := scr.Init(); err != nil {
		return fmt.Errorf("open terminal: %w", err)
	}
	// Whatever happens, give the terminal back in a usable state.
	defer func() {
		if p := recover(); p != nil {
			scr.Fini()
			panic(p)
		}
		scr.Fini()
	}()
	u := &tui{cfg: cfg, s: s, scr: scr}
	events := make(chan tcell.Event, 16)
	quit := make(chan struct{})
	defer close(quit)
	go scr.ChannelEvents(events, quit)
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	u.draw()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			if ev == nil {
				return nil
			}
			if u.handle(ev) {
				return nil
			}
		case <-tick.C:
			if err := s.step(); err != nil {
				return err
			}
			u.ready = true
			if s.allExited() {
				u.exited = joinInts(s.lastExited)
				scr.Fini()
				fmt.Fprintf(stderr, "gosleuth: process %s exited\n", u.exited)
				return nil
			}
		}
		u.draw()
	}
}

// handle applies one input event; it reports true to quit.
func (u *tui) handle(ev tcell.Event) bool {
	v := &u.cfg.View
	switch ev := ev.(type) {
	case *tcell.EventResize:
		u.scr.Sync()
	case *tcell.EventKey:
		if u.editing {
			switch ev.Key() {
			case tcell.KeyEnter:
				u.editing = false
			case tcell.KeyEscape:
				u.editing = false
				u.filterBuf = u.filterBuf[:0]
			case tcell.KeyBackspace, tcell.KeyBackspace2:
				if n := len(u.filterBuf); n > 0 {
					u.filterBuf = u.filterBuf[:n-1]
				}
			case tcell.KeyCtrlC:
				return true
			case tcell.KeyRune:
				u.filterBuf = append(u.filterBuf, ev.Rune())
			}
			v.Filter = string(u.filterBuf)
			u.cursor, u.top = 0, 0
			return false
		}
		switch ev.Key() {
		case tcell.KeyCtrlC:
			return true
		case tcell.KeyEscape:
			v.Filter = ""
		case tcell.KeyEnter:
			// Focus on the selected process: it alone, with its threads.
			if u.cursor >= 0 && u.cursor < len(u.rows) {
				v.Filter = strconv.Itoa(int(u.rows[u.cursor].Proc.PID))
				v.Threads = true
				u.cursor, u.top = 0, 0
			}
		case tcell.KeyUp:
			u.cursor--
		case tcell.KeyDown:
			u.cursor++
		case tcell.KeyPgUp:
			u.cursor -= u.pageRows()
		case tcell.KeyPgDn:
			u.cursor += u.pageRows()
		case tcell.KeyHome:
			u.cursor = 0
		case tcell.KeyEnd:
			u.cursor = 1 << 30
		case tcell.KeyRight:
			v.Sort = (v.Sort + 1) % numColumns
		case tcell.KeyLeft:
			v.Sort = (v.Sort + numColumns - 1) % numColumns
		case tcell.KeyRune:
			switch ev.Rune() {
			case 'q':
				return true
			case 's', '>':
				v.Sort = (v.Sort + 1) % numColumns
			case 'S', '<':
				v.Sort = (v.Sort + numColumns - 1) % numColumns
			case 'r', 'I':
				v.Reverse = !v.Reverse
			case 't':
				v.Tree = !v.Tree
			case 'H':
				v.Threads = !v.Threads
			case 'K':
				v.Kernel = !v.Kernel
			case 'P':
				v.Sort = ColCPU
			case 'M':
				v.Sort = ColRSS
			case 'W':
				v.Sort = ColWake
			case '/', 'f':
				u.editing = true
				u.filterBuf = []rune(v.Filter)
			}
		}
	}
	return false
}

func (u *tui) pageRows() int {
	_, h := u.scr.Size()
	return max(h-u.headerLines()-2, 1)
}

func (u *tui) headerLines() int {
	n := 3
	if u.s.cur.Stats.Denied {
		n++
	}
	return n
}

var (
	styleNormal = tcell.StyleDefault
	styleHead   = tcell.StyleDefault.Reverse(true)
	styleSel    = tcell.StyleDefault.Background(tcell.ColorTeal).Foreground(tcell.ColorBlack)
	styleDim    = tcell.StyleDefault.Foreground(tcell.ColorGray)
	styleBold   = tcell.StyleDefault.Bold(true)
	styleWarn   = tcell.StyleDefault.Foreground(tcell.ColorYellow)
)

func (u *tui) draw() {
	scr := u.scr
	w, h := scr.Size()
	if w < 40 || h < 8 {
		scr.Clear()
		u.put(0, 0, fmt.Sprintf("terminal too small (%dx%d): need 40x8", w, h), styleWarn, w)
		scr.Show()
		return
	}
	v := &u.cfg.View
	s := u.s
	y := 0
	u.put(0, y, fmt.Sprintf("gosleuth top  %s  procs %d  threads %d  every %s", time.Now().Format("15:04:05"),
		len(s.cur.Procs), s.threads(), u.cfg.Interval), styleBold, w)
	y++
	u.put(0, y, s.summary(), styleNormal, w)
	y++
	var mode []string
	if v.Tree {
		mode = append(mode, "tree")
	}
	if v.Threads {
		mode = append(mode, "threads")
	}
	if v.Kernel {
		mode = append(mode, "kernel")
	}
	dir := "↓"
	if v.Reverse {
		dir = "↑"
	}
	status := fmt.Sprintf("sort %s%s  view %s", columns[v.Sort].title, dir, strings.Join(append(mode, "flat")[:max(len(mode), 1)], "+"))
	if u.editing {
		status += "  filter: " + string(u.filterBuf) + "▏"
	} else if v.Filter != "" {
		status += "  filter: " + v.Filter
	}
	u.put(0, y, status, styleDim, w)
	y++
	if s.cur.Stats.Denied {
		u.put(0, y, u.cfg.deniedNote(), styleWarn, w)
		y++
	}
	head := Header()
	head[v.Sort] = head[v.Sort] + dir
	u.put(0, y, FormatLine(head, w), styleHead, w)
	y++
	if !u.ready {
		u.put(0, y, fmt.Sprintf("measuring for %s…", u.cfg.Interval), styleDim, w)
	}
	u.rows = v.Rows(s.cur, &s.rates)
	page := h - y - 1
	u.cursor = min(max(u.cursor, 0), max(len(u.rows)-1, 0))
	if u.cursor < u.top {
		u.top = u.cursor
	}
	if u.cursor >= u.top+page {
		u.top = u.cursor - page + 1
	}
	if !u.ready {
		y++
	} else {
		for i := u.top; i < len(u.rows) && y < h-1; i++ {
			r := u.rows[i]
			u.cells = v.Cells(r, u.cells)
			st := styleNormal
			if r.Task != nil {
				st = styleDim
			}
			if i == u.cursor {
				st = styleSel
			}
			u.put(0, y, FormatLine(u.cells, w), st, w)
			y++
		}
	}
	for ; y < h-1; y++ {
		u.put(0, y, "", styleNormal, w)
	}
	u.put(0, h-1, helpLine, styleDim, w)
	scr.Show()
}

// put writes s at (x, y) and blanks the rest of the line, so the screen
// never needs a full Clear (tcell then sends only the cells that changed).
func (u *tui) put(x, y int, s string, st tcell.Style, w int) {
	for _, r := range s {
		if x >= w {
			return
		}
		u.scr.SetContent(x, y, r, nil, st)
		x++
	}
	for ; x < w; x++ {
		u.scr.SetContent(x, y, ' ', nil, st)
	}
}
