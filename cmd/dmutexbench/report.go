package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dmutex/dmutex"
)

// A row is what the command measured for one algorithm at one size.
type row struct {
	Algorithm string    `json:"algorithm"`
	N         int       `json:"n"`
	Theory    string    `json:"theory"`                // msgs/entry in closed form
	TheoryAtN *float64  `json:"theory_at_n,omitempty"` // its value, one entry at a time, where closed
	MsgsOne   float64   `json:"msgs_per_entry_one"`    // one entry at a time: exact
	K         int       `json:"k"`                     // contenders for MsgsK
	MsgsK     float64   `json:"msgs_per_entry_k"`      // k peers asking at once
	Loads     []latency `json:"loads"`                 // Lock latency under each load
	PerSecond float64   `json:"entries_per_s"`         // entries per second at the heaviest load
	ShareMin  float64   `json:"share_min,omitempty"`   // at the heaviest load: the fewest entries one caller made, as a share of all
	ShareMax  float64   `json:"share_max,omitempty"`   // and the most
	Weakness  string    `json:"weakness"`
	note      string    // shown after the theory in tables
}

// A theory is an algorithm's message cost per entry in closed form.
type theory struct {
	formula string
	// at returns the average over one entry by each peer in turn, one at
	// a time, at size n; nil where it has no closed form (it depends on
	// the topology or the token's position).
	at   func(n float64) float64
	note string // what else the literature says, shown after the value
}

// theories and weaknesses are keyed by variant name. An algorithm missing
// here is still measured, with "?" in its place.
var theories = map[string]theory{
	"centralized":           {"3, 0 at peer 0", func(n float64) float64 { return 3 * (n - 1) / n }, ""},
	"token-ring":            {"N+1+d from rest; 1 at full load", nil, ""},
	"lamport":               {"3(N-1)", func(n float64) float64 { return 3 * (n - 1) }, ""},
	"ricart-agrawala":       {"2(N-1)", func(n float64) float64 { return 2 * (n - 1) }, ""},
	implicitName:            {"2(N-1)", func(n float64) float64 { return 2 * (n - 1) }, "; all ask: 1.5(N-1)"},
	"maekawa":               {"3(K-1), K <= 2ceil(sqrt N)-1", nil, ""},
	"agrawal-el-abbadi":     {"3(K-1), K <= floor(log2 N)+1", nil, ""},
	"suzuki-kasami":         {"N, 0 at the holder", func(n float64) float64 { return min(n, 2*(n-1)) }, ""},
	"raymond":               {"2d, d = tree distance, O(log N)", nil, ""},
	"roucairol-carvalho":    {"0 to 2(N-1), 2 per permission elsewhere", nil, ""},
	"singhal-dynamic":       {"0 to 2(N-1), 2 per peer in the request set", nil, ""},
	"naimi-trehel":          {"h+1, h = path, O(log N) mean", nil, ""},
	"lodha-kshemkalyani":    {"2(N-1)", func(n float64) float64 { return 2 * (n - 1) }, "; all ask: (N+1)(N-1)/N"},
	"ricart-agrawala-token": {"N, 0 at the holder", func(n float64) float64 { return min(n, 2*(n-1)) }, ""},
	"singhal-heuristic":     {"below N alone, N at heavy load", nil, ""},
}

var weaknesses = map[string]string{
	"centralized":           "coordinator is a single point of failure",
	"token-ring":            "a lost token or dead peer stops all",
	"lamport":               "needs FIFO; any dead peer blocks all",
	"ricart-agrawala":       "any dead peer blocks all",
	implicitName:            "any dead peer blocks all",
	"maekawa":               "needs FIFO; a dead voter blocks its quorums",
	"agrawal-el-abbadi":     "needs FIFO; a dead root is on every path",
	"suzuki-kasami":         "a lost token stops all",
	"raymond":               "a lost token or dead inner node stops all",
	"roucairol-carvalho":    "a dead peer blocks all who need its permission",
	"singhal-dynamic":       "a dead peer blocks all who must ask it",
	"naimi-trehel":          "a lost token, or a dead peer on a path, stops all",
	"lodha-kshemkalyani":    "needs FIFO; any dead peer blocks all",
	"ricart-agrawala-token": "a lost token stops all",
	"singhal-heuristic":     "a lost token stops all",
}

// measure runs every variant at every size under every load and returns
// one row per variant and size.
func measure(o *options, p *progressLine) ([]row, error) {
	rng := rand.New(rand.NewPCG(o.seed, 0x646d75746578))
	cells := len(o.variants) * len(o.ns) * len(o.loads)
	each := max(o.duration/time.Duration(cells), time.Millisecond)
	var rows []row
	done := 0
	for _, v := range o.variants {
		for _, n := range o.ns {
			p.show("[%d/%d] %s n=%d: message counts", done+1, cells, v.name, n)
			r := row{Algorithm: v.name, N: n, Theory: "?", Weakness: weaknesses[v.name]}
			if th, ok := theories[v.name]; ok {
				r.Theory = th.formula
				if th.at != nil {
					x := th.at(float64(n))
					r.TheoryAtN = &x
				}
				r.note = th.note
			}
			var err error
			if r.MsgsOne, err = sequentialMessages(v, n, rng); err != nil {
				return nil, err
			}
			r.K = n
			for _, l := range o.loads {
				r.K = max(r.K, l.contenders(n))
			}
			if r.MsgsK, err = contendedMessages(v, n, r.K, rng); err != nil {
				return nil, err
			}
			msgs := newMsgCounter(n)
			c, err := dmutex.New(v.alg, n, append(slices.Clone(v.opts), dmutex.WithObserver(msgs))...)
			if err != nil {
				return nil, err
			}
			heaviest := -1
			for _, l := range o.loads {
				done++
				p.show("[%d/%d] %s n=%d: %v load", done, cells, v.name, n, l)
				lat, err := latencyRun(c, msgs, l.contenders(n), each, rng)
				if err != nil {
					c.Close()
					return nil, err
				}
				lat.Load = l.String()
				r.Loads = append(r.Loads, lat)
				if heaviest < 0 || lat.Contenders > r.Loads[heaviest].Contenders {
					heaviest = len(r.Loads) - 1
				}
			}
			if err := c.Close(); err != nil {
				return nil, err
			}
			if heaviest >= 0 {
				r.PerSecond = r.Loads[heaviest].PerSecond
				r.ShareMin, r.ShareMax = r.Loads[heaviest].ShareMin, r.Loads[heaviest].ShareMax
			}
			rows = append(rows, r)
		}
	}
	p.clear()
	return rows, nil
}

// write prints rows in o.format.
func write(w io.Writer, o *options, rows []row) error {
	if o.format == "report" {
		return writeReport(w, o, rows)
	}
	raw := make([][]string, len(rows))
	shown := make([][]string, len(rows))
	for i, r := range rows {
		raw[i], shown[i] = cells(r, true), cells(r, false)
	}
	return writeTable(w, o.format, rows, header(o.loads, true), raw, header(o.loads, false), shown)
}

// writeTable writes a table in format: value itself as indented JSON,
// the raw header and cells as CSV, or the shown ones as a Markdown or an
// aligned text table.
func writeTable(w io.Writer, format string, value any, rawHeader []string, raw [][]string, header []string, shown [][]string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(value)
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write(rawHeader)
		for _, r := range raw {
			cw.Write(r)
		}
		cw.Flush()
		return cw.Error()
	case "markdown":
		fmt.Fprintf(w, "| %s |\n", strings.Join(header, " | "))
		fmt.Fprintf(w, "|%s\n", strings.Repeat(" --- |", len(header)))
		for _, r := range shown {
			fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
		}
		return nil
	default:
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(header, "\t"))
		for _, r := range shown {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	}
}

// header returns the column names; raw is for CSV, whose latencies are
// plain numbers of microseconds.
func header(loads []load, raw bool) []string {
	h := []string{"algorithm", "n", "msgs/entry theory", "msgs 1 at a time", "msgs k ask", "k"}
	if raw {
		h[2] = "theory"
		h = append(h, "theory_at_n")
	}
	for _, l := range loads {
		if raw {
			h = append(h, "p50_us "+l.String(), "p99_us "+l.String())
		} else {
			h = append(h, "p50 "+l.String(), "p99 "+l.String())
		}
	}
	if raw {
		h = append(h, "entries/s", "share_min", "share_max")
	} else {
		h = append(h, "entries/s", "share min-max")
	}
	return append(h, "weakness") // entries/s and shares: at the heaviest load
}

// cells formats r to match header.
func cells(r row, raw bool) []string {
	num := func(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }
	th := r.Theory
	var at string
	if r.TheoryAtN != nil {
		at = num(*r.TheoryAtN)
		if !raw {
			th += " = " + strings.TrimSuffix(strings.TrimRight(at, "0"), ".")
		}
	}
	if !raw {
		th += r.note
	}
	c := []string{r.Algorithm, strconv.Itoa(r.N), th, num(r.MsgsOne), num(r.MsgsK), strconv.Itoa(r.K)}
	if raw {
		c = append(c, at)
	}
	for _, l := range r.Loads {
		if raw {
			c = append(c, num(l.P50), num(l.P99))
		} else {
			c = append(c, fmtMicros(l.P50), fmtMicros(l.P99))
		}
	}
	c = append(c, strconv.FormatFloat(r.PerSecond, 'f', 0, 64))
	switch {
	case raw:
		c = append(c, strconv.FormatFloat(r.ShareMin, 'f', 4, 64), strconv.FormatFloat(r.ShareMax, 'f', 4, 64))
	case r.ShareMax == 0: // one caller at a time: no share to compare
		c = append(c, "-")
	default:
		pct := func(x float64) string { return strconv.FormatFloat(100*x, 'f', 1, 64) + "%" }
		c = append(c, pct(r.ShareMin)+"-"+pct(r.ShareMax))
	}
	return append(c, r.Weakness)
}

// fmtMicros formats a latency given in microseconds, such as "9.7µs";
// below a microsecond (a local re-entry) in nanoseconds.
func fmtMicros(us float64) string {
	switch {
	case us >= 1000:
		return strconv.FormatFloat(us/1000, 'f', 2, 64) + "ms"
	case us >= 1:
		return strconv.FormatFloat(us, 'f', 1, 64) + "µs"
	default:
		return strconv.FormatFloat(us*1000, 'f', 0, 64) + "ns"
	}
}
