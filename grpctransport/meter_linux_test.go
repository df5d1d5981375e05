package grpctransport

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A meter counts what a benchmark's loop cost the process besides time:
// CPU time (user and system, all goroutines), which a loaded machine
// inflates much less than wall time, and read and write system calls.
type meter struct {
	cpu, reads, writes float64
}

func startMeter() meter {
	var m meter
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		m.cpu = float64(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if b, err := os.ReadFile("/proc/self/io"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ": ")
			x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			switch k {
			case "syscr":
				m.reads = x
			case "syscw":
				m.writes = x
			}
		}
	}
	return m
}

// report reports, per op, what was spent since m started: cpu-ns/op,
// reads/op and writes/op.
func (m meter) report(b *testing.B) {
	now := startMeter()
	n := float64(b.N)
	b.ReportMetric((now.cpu-m.cpu)/n, "cpu-ns/op")
	b.ReportMetric((now.reads-m.reads)/n, "reads/op")
	b.ReportMetric((now.writes-m.writes)/n, "writes/op")
}
