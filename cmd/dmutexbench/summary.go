package main

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// maxWidth is the widest line the default report prints, in bytes, so
// that it fits a terminal of 120 columns whatever the locale counts.
const maxWidth = 120

// writeReport prints the default report: a table narrow enough for a
// terminal (the latencies of the lightest and the heaviest load only), a
// legend, and conclusions computed from the numbers. The wide table, with
// the formulas, the fairness and the weaknesses, is -format table.
func writeReport(w io.Writer, o *options, rows []row) error {
	if len(rows) == 0 {
		return nil
	}
	lo, hi := loadsShown(rows[0].Loads)
	header := []string{"algorithm", "n", "theory", "alone", "all ask"}
	for _, i := range []int{lo, hi} {
		if i >= 0 {
			name := rows[0].Loads[i].Load
			header = append(header, "p50 "+name, "p99 "+name)
		}
		if lo == hi {
			break
		}
	}
	header = append(header, "entries/s")
	// Right-aligned numbers, left-aligned names: pad the names to one
	// width, which right alignment then leaves as they are.
	width := len(header[0])
	for _, r := range rows {
		width = max(width, len(r.Algorithm))
	}
	header[0] = fmt.Sprintf("%-*s", width, header[0])
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, r := range rows {
		c := []string{fmt.Sprintf("%-*s", width, r.Algorithm), strconv.Itoa(r.N), "-", num2(r.MsgsOne), num2(r.MsgsK)}
		if r.TheoryAtN != nil {
			c[2] = strings.TrimSuffix(strings.TrimRight(num2(*r.TheoryAtN), "0"), ".")
		}
		lo, hi := loadsShown(r.Loads)
		for _, i := range []int{lo, hi} {
			if i >= 0 {
				c = append(c, fmtMicros(r.Loads[i].P50), fmtMicros(r.Loads[i].P99))
			}
			if lo == hi {
				break
			}
		}
		c = append(c, strconv.FormatFloat(r.PerSecond, 'f', 0, 64))
		fmt.Fprintln(tw, strings.Join(c, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, line := range strings.SplitAfter(table.String(), "\n") {
		// Right alignment pads the first column on its left too.
		fmt.Fprint(w, strings.TrimPrefix(line, "  "))
	}
	fmt.Fprintln(w)
	for _, l := range append(slices.Clone(legend), append([]string{""}, conclusions(rows)...)...) {
		for _, part := range wrap(l, maxWidth) {
			fmt.Fprintln(w, part)
		}
	}
	return nil
}

// legend explains the report's columns, in lines of at most maxWidth.
var legend = []string{
	"theory: messages per entry in closed form at n, one entry at a time (- where the topology or the token decides).",
	"alone: messages per entry measured one entry at a time; all ask: with all n peers asking at once (simulated).",
	"p50, p99: latency of Lock on an in-memory cluster, one caller (light) or one per peer (full); entries/s: at full.",
	"Formulas, fairness and each algorithm's weakness: -format table (wide), markdown, csv or json.",
}

// loadsShown returns the indexes in loads of the lightest and the heaviest
// load, by contenders (the same index if there is one load), or -1, -1.
func loadsShown(loads []latency) (lo, hi int) {
	lo, hi = -1, -1
	for i, l := range loads {
		if lo < 0 || l.Contenders < loads[lo].Contenders {
			lo = i
		}
		if hi < 0 || l.Contenders > loads[hi].Contenders {
			hi = i
		}
	}
	return lo, hi
}

func num2(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }

// conclusions returns what the numbers say, at the largest n measured:
// which algorithm sends the fewest messages per entry one at a time and
// with every peer asking, which the most, and which made the most entries
// per second at the heaviest load. Values that print alike are ties.
func conclusions(rows []row) []string {
	n := 0
	for _, r := range rows {
		n = max(n, r.N)
	}
	var at []row
	for _, r := range rows {
		if r.N == n {
			at = append(at, r)
		}
	}
	alone := func(r row) float64 { return r.MsgsOne }
	all := func(r row) float64 { return r.MsgsK }
	out := []string{fmt.Sprintf("At n = %d:", n)}
	if len(at) == 1 {
		out = append(out, fmt.Sprintf("  %s sends %s messages per entry alone and %s with all %d asking.",
			at[0].Algorithm, num2(at[0].MsgsOne), num2(at[0].MsgsK), n))
	} else {
		out = append(out,
			fmt.Sprintf("  alone, the fewest messages per entry: %s; the most: %s.",
				ranked(at, alone, false), ranked(at, alone, true)),
			fmt.Sprintf("  with all %d asking, the fewest: %s; the most: %s.",
				n, ranked(at, all, false), ranked(at, all, true)))
	}
	best := extreme(at, func(r row) float64 { return float64(int64(r.PerSecond)) }, true)
	if r := at[best[0]]; r.PerSecond > 0 {
		_, hi := loadsShown(r.Loads)
		out = append(out, fmt.Sprintf("  the most entries per second under %s load (this run; timings vary): %s, %.0f/s, p50 %s.",
			r.Loads[hi].Load, names(at, best), r.PerSecond, fmtMicros(r.Loads[hi].P50)))
	}
	return out
}

// wrap breaks line at spaces into lines of at most width bytes, the
// later ones indented by two spaces. A word longer than width stays
// whole.
func wrap(line string, width int) []string {
	var out []string
	for len(line) > width {
		cut := strings.LastIndexByte(line[:width+1], ' ')
		if cut <= 2 {
			break
		}
		out = append(out, line[:cut])
		line = "  " + line[cut+1:]
	}
	return append(out, line)
}

// ranked says which rows have the extreme value of f, with the value;
// for the least, also the next value with its rows, such as "centralized
// 2.62 (next: raymond 5.38)".
func ranked(rows []row, f func(row) float64, most bool) string {
	first := extreme(rows, f, most)
	s := fmt.Sprintf("%s %s", names(rows, first), num2(f(rows[first[0]])))
	if most {
		return s
	}
	var rest []row
	for i, r := range rows {
		if !slices.Contains(first, i) {
			rest = append(rest, r)
		}
	}
	if next := extreme(rest, f, most); len(next) > 0 {
		s += fmt.Sprintf(" (next: %s %s)", names(rest, next), num2(f(rest[next[0]])))
	}
	return s
}

// extreme returns the indexes of the rows whose f, as printed, is the
// least (or the most).
func extreme(rows []row, f func(row) float64, most bool) []int {
	var idx []int
	var best string
	var bestV float64
	for i, r := range rows {
		v := f(r)
		switch p := num2(v); {
		case len(idx) > 0 && p == best:
			idx = append(idx, i)
		case len(idx) == 0 || (most && v > bestV) || (!most && v < bestV):
			idx, best, bestV = []int{i}, p, v
		}
	}
	return idx
}

func names(rows []row, idx []int) string {
	s := make([]string, len(idx))
	for i, j := range idx {
		s[i] = rows[j].Algorithm
	}
	return strings.Join(s, " and ")
}
