package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestRun runs the whole comparison briefly: every system is measured and
// the output says what etcd gives that dmutex does not.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	var out bytes.Buffer
	if err := run(&out, config{rounds: 5, duration: 200 * time.Millisecond, contenders: 8}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"etcd (1 node)", "dmutex ricart-agrawala n=3", "dmutex centralized n=3",
		"dmutex suzuki-kasami n=3", "replicated", "leases", "crash"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestVerdict(t *testing.T) {
	for _, tt := range []struct {
		got, target float64
		want        string
	}{
		{12, 10, ">=10x met"},
		{9.9, 10, ">=10x MISSED"},
		{3, 0, "-"},
	} {
		if v := verdict(tt.got, tt.target); v != tt.want {
			t.Errorf("verdict(%v, %v) = %q, want %q", tt.got, tt.target, v, tt.want)
		}
	}
}
