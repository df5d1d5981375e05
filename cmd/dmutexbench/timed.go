package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/dmutex/dmutex"
)

// The timed table's loads, in virtual time (dmutex.RunTimed): every
// message takes exactly T and every critical section E = 1 T. Light load
// is one request per 250 T in the whole cluster, so that requests almost
// never overlap; heavy load is saturation, every peer asking again the
// moment it leaves.
const (
	timedCS          = 1.0
	timedLightPeriod = 250.0 // T between requests in the whole cluster, light load
	timedLightN      = 100   // entries measured at light load
	timedHeavyN      = 320   // entries measured at heavy load
	timedWarmup      = 16    // entries before measuring at heavy load
)

// textbook is Kshemkalyani and Singhal's time table (Distributed
// Computing, ch. 9): synchronization delay and light-load response time,
// keyed by variant name.
var textbook = map[string][2]string{
	"centralized":           {"2T", "2T+E"},
	"token-ring":            {"T", "up to NT+E"},
	"lamport":               {"T", "2T+E"},
	"ricart-agrawala":       {"T", "2T+E"},
	implicitName:            {"T", "2T+E"},
	"maekawa":               {"2T", "2T+E"},
	"agrawal-el-abbadi":     {"2T", "2T+E"},
	"suzuki-kasami":         {"T", "2T+E"},
	"raymond":               {"T log(N)/2", "T log(N)+E"},
	"roucairol-carvalho":    {"T", "2T+E"},
	"singhal-dynamic":       {"T", "2T+E"},
	"naimi-trehel":          {"T", "T(log(N)+1)+E"},
	"lodha-kshemkalyani":    {"T", "2T+E"},
	"ricart-agrawala-token": {"T", "2T+E"},
	"singhal-heuristic":     {"T", "2T+E"},
}

// A timedRow is the timed measurement of one variant at one size, every
// time in units of T.
type timedRow struct {
	Algorithm     string  `json:"algorithm"`
	N             int     `json:"n"`
	SyncDelay     float64 `json:"sync_delay_T"` // heavy load
	SyncBook      string  `json:"sync_delay_textbook"`
	ResponseLight float64 `json:"response_light_T"` // request to exit, E included
	ResponseBook  string  `json:"response_light_textbook"`
	ResponseHeavy float64 `json:"response_heavy_T"`
	Throughput    float64 `json:"entries_per_T_heavy"`
	MsgsLight     float64 `json:"msgs_per_entry_light"`
	MsgsHeavy     float64 `json:"msgs_per_entry_heavy"`
	ShareMin      float64 `json:"share_min_heavy"` // the least and most entries of one peer, as a share of all
	ShareMax      float64 `json:"share_max_heavy"`
}

// measureTimed runs the timed simulation for every variant and size.
func measureTimed(o *options) ([]timedRow, error) {
	var rows []timedRow
	for _, n := range o.ns {
		for _, v := range o.variants {
			light, err := dmutex.RunTimed(v.alg, n, dmutex.Timing{CS: timedCS, Rate: 1 / (timedLightPeriod * float64(n)), Entries: timedLightN, Seed: o.seed}, v.opts...)
			if err != nil {
				return nil, fmt.Errorf("%s n=%d light: %w", v.name, n, err)
			}
			heavy, err := dmutex.RunTimed(v.alg, n, dmutex.Timing{CS: timedCS, Entries: timedHeavyN, Warmup: timedWarmup, Seed: o.seed}, v.opts...)
			if err != nil {
				return nil, fmt.Errorf("%s n=%d heavy: %w", v.name, n, err)
			}
			book := textbook[v.name]
			if book[0] == "" {
				book = [2]string{"?", "?"}
			}
			rows = append(rows, timedRow{
				Algorithm: v.name, N: n,
				SyncDelay: heavy.SyncDelay, SyncBook: book[0],
				ResponseLight: light.Response, ResponseBook: book[1],
				ResponseHeavy: heavy.Response, Throughput: heavy.Throughput,
				MsgsLight: light.Messages, MsgsHeavy: heavy.Messages,
				ShareMin: float64(slices.Min(heavy.PerPeer)) / float64(heavy.Entries),
				ShareMax: float64(slices.Max(heavy.PerPeer)) / float64(heavy.Entries),
			})
		}
	}
	return rows, nil
}

var timedHeader = []string{"algorithm", "n", "sync delay", "textbook", "response light", "textbook",
	"response heavy", "entries/T heavy", "msgs light", "msgs heavy", "share min-max heavy"}

// cells formats r to match timedHeader.
func (r timedRow) cells() []string {
	num := func(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) }
	pct := func(x float64) string { return strconv.FormatFloat(100*x, 'f', 1, 64) + "%" }
	return []string{r.Algorithm, strconv.Itoa(r.N), num(r.SyncDelay) + "T", r.SyncBook,
		num(r.ResponseLight) + "T", r.ResponseBook, num(r.ResponseHeavy) + "T", num(r.Throughput),
		num(r.MsgsLight), num(r.MsgsHeavy), pct(r.ShareMin) + "-" + pct(r.ShareMax)}
}

// writeTimed writes the timed table in o's format.
func writeTimed(w io.Writer, o *options, rows []timedRow) error {
	cells := make([][]string, len(rows))
	for i, r := range rows {
		cells[i] = r.cells()
	}
	return writeTable(w, o.format, rows, timedHeader, cells, timedHeader, cells)
}
