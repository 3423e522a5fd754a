package syscalls

import (
	"testing"
)

func TestRows(t *testing.T) {
	evs := []Event{{Name: "read", Nr: 0}, {Name: "futex", Nr: 202}, {Name: "close", Nr: 3}, {Name: "all", Nr: -1, Raw: true}, {Name: "write", Nr: 1}}
	rows, total := Rows(evs, []uint64{30, 60, 0, 500, 30}, 2)
	if total != 120 {
		t.Fatalf("total %d, want 120 (raw and zero rows left out)", total)
	}
	want := []Row{
		{Name: "futex", Nr: 202, Count: 60, RatePerS: 30, Percent: 50},
		{Name: "read", Nr: 0, Count: 30, RatePerS: 15, Percent: 25},
		{Name: "write", Nr: 1, Count: 30, RatePerS: 15, Percent: 25},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v", rows)
	}
	for i := range want {
		if rows[i].Name != want[i].Name || rows[i].Count != want[i].Count || rows[i].RatePerS != want[i].RatePerS || rows[i].Percent != want[i].Percent {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
}

func TestProcSamplerParse(t *testing.T) {
	s := NewProcSampler("testdata/proc", 1, AMD64)
	for _, line := range []string{
		"running",
		"202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x4600",
		"202 0x7f 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x4600\n",
		"35 0x1 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x4600",
		"-1 0x7ffd 0x4600",
	} {
		s.add([]byte(line))
	}
	var a Approx
	s.Fill(&a)
	if a.Samples != 5 || a.Running != 20 || a.User != 20 || len(a.Blocked) != 2 ||
		a.Blocked[0].Name != "futex" || a.Blocked[0].Samples != 2 || a.Blocked[1].Name != "nanosleep" {
		t.Errorf("approx %+v", a)
	}
}
