// Command dmutexlab is an explorer of dmutex's algorithms in the browser.
// It serves one self-contained page on 127.0.0.1 and a JSON API over the
// same World the simulator and the model checker drive: pick an
// algorithm, make peers request, click a message in flight to deliver it,
// crash a peer or cut the network, play a seeded run, or load the model
// checker's counterexample for a broken variant. A failure detector is
// part of the configuration (none, perfect, or imperfect with a bound of
// false suspicions, and WithRecovery for the algorithms that have one):
// each peer's buttons then make it suspect another peer (sI-J) or trust
// it again (uI-J) whenever the World offers that step, the scheduler's
// steps take those the detector owes (a suspicion of a crashed peer, a
// trust of a live one), and the check explores one crash of any peer, so
// that the counterexamples of the naive recoveries and of the imperfect
// detector load and replay. The page only draws; every step is taken by
// the library, replayed from the configuration, the seed and the choices
// that the page's URL holds, so a link reopens a run exactly.
//
// The server answers only its own page (a request that a browser marks as
// coming from another site, or for another host name, is refused), runs
// at most two checks at once, each within 30 s and a memory bound, and
// refuses with a JSON error any value it cannot take.
//
//	go run ./cmd/dmutexlab            # prints the URL to open
//	go run ./cmd/dmutexlab -addr 127.0.0.1:8080
package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dmutex/dmutex"
)

//go:embed static
var static embed.FS

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dmutexlab:", err)
		os.Exit(2)
	}
}

// serve serves until ctx ends.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("dmutexlab", flag.ContinueOnError)
	fl.SetOutput(stderr)
	addr := fl.String("addr", "127.0.0.1:0", "address to listen on; port 0 picks a free one")
	if err := fl.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := newServer()
	fmt.Fprintf(stdout, "dmutexlab: open http://%s/\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shut)
	<-errc
	return err
}

// newServer is the lab's server, with timeouts: a client that sends its
// request slowly, reads the answer slowly or not at all, or keeps an idle
// connection, does not hold the server's resources for long.
func newServer() *http.Server {
	return &http.Server{
		Handler:           newHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		// A check may take checkTime; the answer then has this long to go
		// out to a client that reads it slowly, or not at all.
		WriteTimeout: checkTime + 30*time.Second,
		IdleTimeout:  30 * time.Second,
	}
}

// The server's bounds: whatever a request asks, a check takes at most
// checkTime and checkMemory (as the checker counts it: the Go heap may
// reach about twice that), at most maxChecks run at once, a state's query
// has at most maxQuery bytes, and an answer at most maxAnswer.
const (
	checkMemory = 256 << 20
	maxChecks   = 2
	maxQuery    = 16 << 10
	maxAnswer   = 8 << 20
)

// checkTime bounds a check's time; a variable, for a test.
var checkTime = 30 * time.Second

// newHandler serves the page and the API.
func newHandler() http.Handler { return newHandlerSlots(make(chan struct{}, maxChecks)) }

// newHandlerSlots is newHandler with checks' slots of its own: a check
// runs only when it can put a value in checks.
func newHandlerSlots(checks chan struct{}) http.Handler {
	mux := http.NewServeMux()
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	mux.Handle("GET /", http.FileServerFS(sub))
	mux.HandleFunc("GET /api/meta", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, meta())
	})
	mux.HandleFunc("GET /api/run", func(w http.ResponseWriter, r *http.Request) {
		st, err := parseQuery(r)
		if err != nil {
			writeError(w, err)
			return
		}
		rn, err := replay(st)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, rn.view())
	})
	mux.HandleFunc("GET /api/check", func(w http.ResponseWriter, r *http.Request) {
		st, err := parseQuery(r)
		if err != nil {
			writeError(w, err)
			return
		}
		select {
		case checks <- struct{}{}:
			defer func() { <-checks }()
		default:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{
				"error": fmt.Sprintf("%d checks are running already; try again when one is done", cap(checks))})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), checkTime)
		defer cancel()
		cx, res, err := checkState(ctx, st)
		if errors.Is(err, context.DeadlineExceeded) {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{
				"error": fmt.Sprintf("the check ran out of its %v; try fewer peers or false suspicions", checkTime)})
			return
		}
		if err != nil {
			writeError(w, err)
			return
		}
		out := checkView{Result: res}
		if cx != nil {
			out.Query = cx.query()
		}
		writeJSON(w, http.StatusOK, out)
	})
	return sameSite(mux)
}

// sameSite refuses an API request that does not come from the lab's own
// page, so that another web page open in the same browser cannot drive
// the server (a GET needs no CORS preflight): a browser says where a
// request comes from in Sec-Fetch-Site, Origin or Referer, and each it
// sends must name this server. A Host that is not a loopback address or
// localhost is refused too, against a name rebound to 127.0.0.1. Clients
// that send none of the three, such as curl, are served.
func sameSite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			if err := fromOwnPage(r); err != nil {
				writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func fromOwnPage(r *http.Request) error {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	if ip := net.ParseIP(strings.Trim(host, "[]")); (ip == nil || !ip.IsLoopback()) && host != "localhost" {
		return fmt.Errorf("host %q: the lab answers only on a loopback address", r.Host)
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return fmt.Errorf("Sec-Fetch-Site %q: the lab answers only its own page", site)
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
		return fmt.Errorf("origin %q: the lab answers only its own page", o)
	}
	if ref := r.Header.Get("Referer"); ref != "" {
		if u, err := url.Parse(ref); err != nil || u.Host != r.Host {
			return fmt.Errorf("referer %q: the lab answers only its own page", ref)
		}
	}
	return nil
}

type checkView struct {
	Result *dmutex.CheckResult `json:"result"`
	Query  string              `json:"query,omitempty"` // the counterexample's state, if any
}

// parseQuery reads the state from the request's query, refusing a query
// that does not parse.
func parseQuery(r *http.Request) (*state, error) {
	if len(r.URL.RawQuery) > maxQuery {
		return nil, bad("state of %d bytes, more than %d", len(r.URL.RawQuery), maxQuery)
	}
	q, err := urlParse(r.URL.RawQuery)
	if err != nil {
		return nil, bad("malformed state: %v", err)
	}
	return parseState(q)
}

func writeError(w http.ResponseWriter, err error) {
	var br *badRequest
	if errors.As(err, &br) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": br.msg})
		return
	}
	log.Printf("dmutexlab: %v", err)
	writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
}

// writeJSON writes v as the answer, or an error if v does not encode (a
// NaN, say) or its encoding is longer than maxAnswer.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	switch {
	case err != nil:
		log.Printf("dmutexlab: %v", err)
		code, b = http.StatusInternalServerError, errorJSON("dmutexlab: the answer does not encode: "+err.Error())
	case len(b) > maxAnswer:
		code, b = http.StatusBadRequest, errorJSON(fmt.Sprintf("the answer would be %d bytes, more than %d: ask for fewer choices", len(b), maxAnswer))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func errorJSON(msg string) []byte {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return b
}

// The API's views.

type metaView struct {
	Algorithms []algView     `json:"algorithms"`
	Variants   []variantView `json:"variants"`
	Deliveries []string      `json:"deliveries"`
	Detectors  []string      `json:"detectors"`
	MaxN       int           `json:"maxN"`
	MaxFalse   int           `json:"maxFalse"`
}

type algView struct {
	Name      string `json:"name"`
	NeedsFIFO bool   `json:"needsFIFO"`
	Option    string `json:"option,omitempty"` // the option it takes: implicit, sets or tree
	Recovery  bool   `json:"recovery"`         // it takes WithRecovery
}

type variantView struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Teaches   string `json:"teaches"`
	N         int    `json:"n"`
	Net       string `json:"net"`
	Detector  string `json:"detector"`
	False     int    `json:"false"`
	Recovery  bool   `json:"recovery"`
}

func meta() metaView {
	m := metaView{MaxN: maxN, MaxFalse: maxFalse}
	for _, a := range dmutex.Algorithms() {
		// WithRecovery is an error for an algorithm that has none.
		_, err := dmutex.NewSimulation(a, 3, dmutex.SimConfig{}, dmutex.WithRecovery())
		av := algView{Name: a.String(), NeedsFIFO: a.NeedsFIFO(), Recovery: err == nil}
		switch a {
		case dmutex.RicartAgrawala:
			av.Option = "implicit"
		case dmutex.Maekawa:
			av.Option = "sets"
		case dmutex.Raymond:
			av.Option = "tree"
		}
		m.Algorithms = append(m.Algorithms, av)
	}
	for _, v := range dmutex.Variants() {
		net := dmutex.DeliverFIFO
		if v.Network == dmutex.NetworkUnordered {
			net = dmutex.DeliverReorder
		}
		m.Variants = append(m.Variants, variantView{v.Name, v.Algorithm.String(), v.Teaches, v.N, net.String(),
			v.Detector.Kind.String(), v.Detector.FalseSuspicions, hasRecovery(&v)})
	}
	for _, d := range deliveries {
		m.Deliveries = append(m.Deliveries, d.String())
	}
	for _, d := range detectors {
		m.Detectors = append(m.Detectors, d.String())
	}
	return m
}

type runView struct {
	Query     string      `json:"query"` // the state, canonical
	Config    configView  `json:"config"`
	Peers     []peerView  `json:"peers"`
	InFlight  []msgView   `json:"inFlight"`
	Events    []eventView `json:"events"`
	Ticks     []tick      `json:"ticks"`
	Counts    countsView  `json:"counts"`
	Done      bool        `json:"done"` // the scheduler has nothing left to do
	Violation *violation  `json:"violation"`
	Blocked   string      `json:"blocked,omitempty"`
	CX        int         `json:"cx"`
	FalseUsed int         `json:"falseUsed"` // suspicions of live peers so far
}

type configView struct {
	Alg      string  `json:"alg"`
	N        int     `json:"n"`
	Seed     int64   `json:"seed"`
	Net      string  `json:"net"`
	Variant  string  `json:"variant"`
	Implicit bool    `json:"implicit"`
	Sets     string  `json:"sets"`
	Tree     string  `json:"tree"`
	Loss     float64 `json:"loss"`
	Recovery bool    `json:"recovery"`
	Detector string  `json:"detector"`
	False    int     `json:"false"`
}

type peerView struct {
	ID      int                 `json:"id"`
	Status  string              `json:"status"` // idle, waiting, inside or crashed
	Pending int                 `json:"pending"`
	Fields  []dmutex.StateField `json:"fields"`
	Leave   bool                `json:"canLeave"`
	// The failure detector's: the peers this one suspects now, and those
	// it may start to suspect or trust again by a click.
	Suspects []int `json:"suspects"`
	Suspect  []int `json:"suspect"`
	Trust    []int `json:"trust"`
}

type msgView struct {
	Seq         uint64 `json:"seq"`
	Kind        string `json:"kind"`
	From        int    `json:"from"`
	To          int    `json:"to"`
	Text        string `json:"text"`
	Deliverable bool   `json:"deliverable"` // first on its channel: a click delivers it
}

type eventView struct {
	Tick int    `json:"tick"` // the tick (column) it happened in
	Kind string `json:"kind"`
	Peer int    `json:"peer"`
	Seq  uint64 `json:"seq,omitempty"`
	Msg  string `json:"msg,omitempty"` // kind of the message
	From int    `json:"from"`
	To   int    `json:"to"`
	Text string `json:"text,omitempty"`
}

type countsView struct {
	Kinds    []kindCount `json:"kinds"`
	Messages uint64      `json:"messages"`
	Entries  uint64      `json:"entries"`
	Theory   string      `json:"theory"` // the total per entry in closed form
}

type kindCount struct {
	Kind   string `json:"kind"`
	Sent   uint64 `json:"sent"`
	Theory string `json:"theory"` // per entry, in closed form
}

func (r *run) view() runView {
	w := r.sim.World()
	st := r.st
	v := runView{
		Query: st.query(),
		Config: configView{st.Alg.String(), st.N, st.Seed, st.Delivery.String(), st.Variant, st.Implicit,
			st.Sets, st.Tree, st.Loss, st.Recovery, st.Detector.String(), st.False},
		Ticks:     r.ticks,
		Violation: r.violation,
		Blocked:   r.blocked,
		CX:        st.CX,
		Done:      r.quiet(),
	}
	if v.Ticks == nil {
		v.Ticks = []tick{}
	}
	enabled := map[string]bool{}
	for _, t := range w.Transitions() {
		enabled[t.ID()] = true
	}
	ds := detectorOf(w)
	v.FalseUsed = ds.falseUsed
	for p := range w.N() {
		ps := w.Peer(p)
		status := ps.State()
		fields := w.Describe(p)
		if fields == nil {
			fields = []dmutex.StateField{}
		}
		if n := len(r.ticks); n > 0 && r.ticks[n-1].BrokeIn == p+1 {
			status = "inside" // its machine went in, and broke the promise
		}
		pv := peerView{ID: p, Status: status, Pending: ps.Pending, Fields: fields, Leave: enabled[fmt.Sprintf("l%d", p)],
			Suspects: []int{}, Suspect: []int{}, Trust: []int{}}
		for q := range w.N() {
			if ds.suspects[[2]int{p, q}] {
				pv.Suspects = append(pv.Suspects, q)
			}
			if enabled[fmt.Sprintf("s%d-%d", p, q)] {
				pv.Suspect = append(pv.Suspect, q)
			}
			if enabled[fmt.Sprintf("u%d-%d", p, q)] {
				pv.Trust = append(pv.Trust, q)
			}
		}
		v.Peers = append(v.Peers, pv)
	}
	v.InFlight = []msgView{}
	for _, m := range w.Messages() {
		v.InFlight = append(v.InFlight, msgView{m.Seq, m.Msg.Kind.String(), m.Msg.From, m.Msg.To, msgText(m.Msg),
			enabled[fmt.Sprintf("d%d", m.Seq)]})
	}
	evs := w.Events()
	v.Events = []eventView{}
	for ti, t := range r.ticks {
		for _, e := range evs[t.Events[0]:t.Events[1]] {
			ev := eventView{Tick: ti + 1, Kind: e.Kind.String(), Peer: e.Peer, Seq: e.Seq, From: -1, To: -1}
			switch e.Kind {
			case dmutex.EventSend, dmutex.EventReceive, dmutex.EventLost:
				ev.Msg, ev.From, ev.To, ev.Text = e.Msg.Kind.String(), e.Msg.From, e.Msg.To, msgText(e.Msg)
			case dmutex.EventPartition:
				ev.Text = fmt.Sprint(e.Groups)
			case dmutex.EventSuspect, dmutex.EventTrust:
				ev.To = e.Target
			}
			v.Events = append(v.Events, ev)
		}
		if t.BrokeIn > 0 {
			// The entry that broke the promise, drawn beside the holder's.
			v.Events = append(v.Events, eventView{Tick: ti + 1, Kind: dmutex.EventEnter.String(), Peer: t.BrokeIn - 1, From: -1, To: -1})
		}
	}
	stats := w.Stats()
	v.Counts = countsView{Messages: stats.Messages, Entries: stats.Entries}
	th := theoryOf(st)
	v.Counts.Theory = th.total
	for k := dmutex.MessageKind(1); k.Valid(); k++ {
		name := k.String()
		per, known := th.kinds[name]
		if stats.ByKind[name] == 0 && !known {
			continue
		}
		v.Counts.Kinds = append(v.Counts.Kinds, kindCount{name, stats.ByKind[name], per})
	}
	if v.Counts.Kinds == nil {
		v.Counts.Kinds = []kindCount{}
	}
	return v
}

// A theory is what the literature says an entry costs in messages, by
// kind and in all, with one peer asking at a time.
type theory struct {
	total string
	kinds map[string]string
}

func theoryOf(st *state) theory {
	n := st.N
	n1 := fmt.Sprintf("N-1 = %d", n-1)
	switch st.Alg {
	case dmutex.Centralized:
		return theory{"3 (0 at the coordinator P0)", map[string]string{"request": "1", "grant": "1", "release": "1"}}
	case dmutex.TokenRing:
		return theory{fmt.Sprintf("at most N = %d (the token's hops)", n), map[string]string{"token": "0 to N per entry; it circulates"}}
	case dmutex.Lamport:
		return theory{fmt.Sprintf("3(N-1) = %d", 3*(n-1)), map[string]string{"request": n1, "reply": n1, "release": n1}}
	case dmutex.RicartAgrawala:
		if st.Implicit {
			return theory{fmt.Sprintf("2(N-1) = %d alone; 1.5(N-1) when all ask", 2*(n-1)),
				map[string]string{"request": n1, "reply": "N-1 alone, fewer in contention"}}
		}
		return theory{fmt.Sprintf("2(N-1) = %d", 2*(n-1)), map[string]string{"request": n1, "reply": n1}}
	case dmutex.SuzukiKasami, dmutex.RicartAgrawalaToken:
		return theory{fmt.Sprintf("N = %d (0 at the holder)", n), map[string]string{"request": n1, "token": "1"}}
	case dmutex.SinghalHeuristic:
		return theory{fmt.Sprintf("below N = %d alone, N when all ask (0 at the holder)", n),
			map[string]string{"request": "the peers in state R, at most N-1", "token": "1"}}
	case dmutex.Maekawa:
		return theory{"3(K-1) to 5(K-1), K = voting set size",
			map[string]string{"request": "K-1", "locked": "K-1", "release": "K-1", "inquire": "contention only",
				"failed": "contention only", "relinquish": "contention only"}}
	case dmutex.AgrawalElAbbadi:
		return theory{"3(K-1) to 4(K-1), K = path length, about log2 N",
			map[string]string{"request": "K-1", "locked": "K-1", "release": "K-1", "inquire": "contention only",
				"failed": "contention only", "relinquish": "contention only"}}
	case dmutex.SinghalDynamic:
		return theory{fmt.Sprintf("0 to 2(N-1) = %d: 2 per peer in the request set; N-1 = %d on average at light load", 2*(n-1), n-1),
			map[string]string{"request": "|R_i|, 0 to N-1", "reply": "|R_i|, 0 to N-1"}}
	case dmutex.Raymond:
		return theory{"2d, d = tree distance to the holder", map[string]string{"request": "d", "privilege": "d"}}
	case dmutex.NaimiTrehel:
		return theory{"h+1, h = hops to the root; O(log N) mean, N at worst", map[string]string{"request": "h", "token": "1"}}
	}
	return theory{"?", nil}
}

// urlParse parses a raw query strictly: a bad escape or a bad pair is an
// error, not a dropped value.
func urlParse(raw string) (map[string][]string, error) {
	q := map[string][]string{}
	if raw == "" {
		return q, nil
	}
	for pair := range strings.SplitSeq(raw, "&") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q has no value", pair)
		}
		ku, err := unescape(k)
		if err != nil {
			return nil, err
		}
		vu, err := unescape(v)
		if err != nil {
			return nil, err
		}
		if !knownKeys[ku] {
			return nil, fmt.Errorf("unknown key %q", ku)
		}
		q[ku] = append(q[ku], vu)
	}
	return q, nil
}

var knownKeys = map[string]bool{"alg": true, "n": true, "seed": true, "net": true, "variant": true,
	"implicit": true, "sets": true, "tree": true, "loss": true, "recovery": true, "detector": true, "false": true,
	"c": true, "cx": true}

var unescape = url.QueryUnescape
