package main

import (
	"context"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/dmutex/dmutex"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The browser tests drive the page in headless Chromium (Debian's
// package; .ci/run installs it) and compare what it shows with what the
// library gives for the same choices. They skip when Chromium is missing.

var (
	screenshot = flag.String("dmutexlab.screenshot", os.Getenv("DMUTEXLAB_SCREENSHOT"),
		"save a screenshot of the lab to this PNG file (such as ../../docs/dmutexlab.png)")
	screenshotQuery = flag.String("dmutexlab.screenshot.query", "alg=ricart-agrawala&n=3&seed=3&c=r0.r1.r2.a6",
		"the run to picture, as the page's query")
)

// One Chromium serves every browser test of the binary, a tab each.
var browser struct {
	once    sync.Once
	ctx     context.Context
	cancel  func()
	skipped string
}

func chromiumPath() string {
	if p := os.Getenv("DMUTEXLAB_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func closeBrowser() {
	if browser.cancel != nil {
		browser.cancel()
	}
}

// tab opens a fresh tab on a shared headless Chromium, or skips the test.
func tab(t *testing.T) context.Context {
	t.Helper()
	browser.once.Do(startBrowser)
	if browser.skipped != "" {
		t.Skip(browser.skipped)
	}
	ctx, cancel := chromedp.NewContext(browser.ctx)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx)) // opens the tab, for as long as ctx lives
	// Generous: every wait below is for a condition, never for a time.
	ctx, tcancel := context.WithTimeout(ctx, 120*time.Second)
	t.Cleanup(tcancel)
	return ctx
}

func startBrowser() {
	path := chromiumPath()
	if path == "" {
		browser.skipped = "chromium is not installed (apt-get install chromium); browser tests skipped"
		return
	}
	dir, err := os.MkdirTemp("", "dmutexlab-chromium-")
	if err != nil {
		browser.skipped = err.Error()
		return
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1400, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	// Start the browser now. Its lifetime is that of the context of this
	// first call, so it takes no timeout.
	if err := chromedp.Do(bctx); err != nil {
		bcancel()
		acancel()
		os.RemoveAll(dir)
		browser.skipped = "chromium did not start: " + err.Error()
		return
	}
	browser.ctx = bctx
	browser.cancel = func() {
		bcancel()
		acancel() // waits for the browser to exit
		os.RemoveAll(dir)
	}
}

// waitQuery waits until the page has drawn the run whose state is query.
func waitQuery(query string) chromedp.Action[chromedp.Void] {
	return poll(fmt.Sprintf("document.body.dataset.query === %q", query))
}

// poll waits until the expression is true in the page, for at most a
// generous 90 seconds.
func poll(expr string) chromedp.Action[chromedp.Void] {
	p := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(90*time.Second))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := p(ctx, t)
		return chromedp.Void{}, err
	}
}

func stateQuery(alg dmutex.Algorithm, n int, seed int64, choices ...string) string {
	return (&state{Alg: alg, N: n, Seed: seed, Choices: choices}).query()
}

// What the page shows, read from its DOM.
type shown struct {
	Msgs []struct {
		Seq   uint64 `json:"seq"`
		State string `json:"state"`
		From  int    `json:"from"`
		To    int    `json:"to"`
		Kind  string `json:"kind"`
	} `json:"msgs"`
	Deliverable []uint64 `json:"deliverable"`
	CS          int      `json:"cs"`
	Peers       []struct {
		Status string      `json:"status"`
		Fields [][2]string `json:"fields"`
	} `json:"peers"`
}

const readShown = `({
  msgs: [...document.querySelectorAll('#diagram g.msg-g')].map(g => ({seq: +g.dataset.seq, state: g.dataset.state,
    from: +g.dataset.from, to: +g.dataset.to, kind: g.dataset.kind})),
  deliverable: [...document.querySelectorAll('#diagram g.head.deliverable')].map(g => +g.dataset.seq),
  cs: document.querySelectorAll('#diagram rect.cs').length,
  peers: [...document.querySelectorAll('#peers .peer')].map(c => ({status: c.dataset.status,
    fields: [...c.querySelectorAll('tr')].map(tr => [tr.dataset.field, tr.querySelector('.value').textContent])})),
})`

// assertMatches checks the page against the world of a reference
// simulation given the same choices.
func assertMatches(t *testing.T, ctx context.Context, w *dmutex.World, step string) {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[shown](readShown))
	require.NoError(t, err)
	// The diagram: every message sent, delivered, lost or still pending,
	// from its sender to its receiver.
	inFlight := map[uint64]bool{}
	for _, m := range w.Messages() {
		inFlight[m.Seq] = true
	}
	lost := map[uint64]bool{}
	for _, e := range w.Events() {
		if e.Kind == dmutex.EventLost {
			lost[e.Seq] = true
		}
	}
	want := []string{}
	entries := 0
	for _, e := range w.Events() {
		switch e.Kind {
		case dmutex.EventSend:
			state := "delivered"
			if inFlight[e.Seq] {
				state = "pending"
			} else if lost[e.Seq] {
				state = "lost"
			}
			want = append(want, fmt.Sprintf("m%d %s P%d->P%d %s", e.Seq, e.Msg.Kind, e.Msg.From, e.Msg.To, state))
		case dmutex.EventEnter:
			entries++
		}
	}
	have := []string{}
	for _, m := range got.Msgs {
		have = append(have, fmt.Sprintf("m%d %s P%d->P%d %s", m.Seq, m.Kind, m.From, m.To, m.State))
	}
	assert.Equal(t, want, have, "%s: the diagram's messages", step)
	assert.Equal(t, entries, got.CS, "%s: the diagram's critical sections", step)
	heads := []uint64{}
	for _, tr := range w.Transitions() {
		if tr.Kind == dmutex.TransDeliver {
			heads = append(heads, tr.Seq)
		}
	}
	slices.Sort(heads)
	slices.Sort(got.Deliverable)
	if got.Deliverable == nil {
		got.Deliverable = []uint64{}
	}
	assert.Equal(t, heads, got.Deliverable, "%s: the messages a click delivers", step)
	// The state panels.
	require.Len(t, got.Peers, w.N(), step)
	for p := range w.N() {
		ps := w.Peer(p)
		status := ps.State()
		assert.Equal(t, status, got.Peers[p].Status, "%s: P%d's status", step, p)
		var fields [][2]string
		for _, f := range w.Describe(p) {
			fields = append(fields, [2]string{f.Name, f.Value})
		}
		assert.Equal(t, fields, got.Peers[p].Fields, "%s: P%d's state", step, p)
	}
}

// TestBrowserByHand: choose Ricart-Agrawala with three peers, make two
// of them request, and deliver messages by clicking them on the diagram;
// after every click the diagram and the state panels are the World's
// for the same choices. Then the run's shared URL, opened in a new tab,
// draws the same diagram, and back and a jump replay to earlier steps.
func TestBrowserByHand(t *testing.T) {
	ctx := tab(t)
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	const seed = 4
	q := func(choices ...string) string { return stateQuery(dmutex.RicartAgrawala, 3, seed, choices...) }
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/?alg=token-ring&n=5"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.SetValue(chromedp.CSS("#alg"), "ricart-agrawala"),
		chromedp.SetValue(chromedp.CSS("#n"), "3"),
		chromedp.SetValue(chromedp.CSS("#seed"), strconv.Itoa(seed)),
		chromedp.Click(chromedp.CSS("#apply")),
		waitQuery(q()),
	))
	var choices []string
	sim, err := dmutex.NewSimulation(dmutex.RicartAgrawala, 3, dmutex.SimConfig{Seed: uint64(seed)})
	require.NoError(t, err)
	w := sim.World()
	for _, p := range []int{0, 2} {
		choices = append(choices, "r"+strconv.Itoa(p))
		require.NoError(t, chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(fmt.Sprintf(`.peer[data-peer="%d"] button.request`, p))),
			waitQuery(q(choices...))))
		require.NoError(t, sim.Request(p))
		assertMatches(t, ctx, w, strings.Join(choices, "."))
	}
	clicks := 0
	for ; clicks < 20; clicks++ {
		// Deliver the newest deliverable message, so that older ones stay
		// pending a while; when nothing is in flight, the peer inside
		// leaves.
		var next dmutex.Transition
		found := false
		for _, tr := range w.Transitions() {
			if tr.Kind == dmutex.TransDeliver && (!found || tr.Seq > next.Seq) {
				next, found = tr, true
			}
		}
		sel := ""
		if found {
			sel = fmt.Sprintf(`#diagram g.head.deliverable[data-seq="%d"]`, next.Seq)
		} else {
			for _, tr := range w.Transitions() {
				if tr.Kind == dmutex.TransLeave {
					next, found = tr, true
					sel = fmt.Sprintf(`.peer[data-peer="%d"] button.leave`, tr.Peer)
				}
			}
		}
		if !found {
			break
		}
		choices = append(choices, next.ID())
		require.NoError(t, chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(sel)),
			waitQuery(q(choices...))), "click %s", sel)
		_, err := w.Apply(next)
		require.NoError(t, err)
		assertMatches(t, ctx, w, strings.Join(choices, "."))
	}
	require.Less(t, clicks, 20, "the run should have come to rest")
	assert.Equal(t, uint64(2), w.Stats().Entries)

	// Share: the link reopens the same run, the same diagram.
	href, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#share"), "href"))
	require.NoError(t, err)
	link := href.Value
	svg, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("#diagram")))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(link, "?"), link)
	ctx2, cancel := chromedp.NewContext(browser.ctx)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx2))
	require.NoError(t, chromedp.Do(ctx2,
		chromedp.Navigate(srv.URL+"/"+link),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		waitQuery(q(choices...))))
	svg2, err := chromedp.Run(ctx2, chromedp.OuterHTML(chromedp.CSS("#diagram")))
	require.NoError(t, err)
	assert.Equal(t, svg, svg2, "the shared URL draws the same diagram")
	assertMatches(t, ctx2, w, "shared URL")

	// Back, and a jump to an earlier step, replay to there.
	require.NoError(t, chromedp.Do(ctx2,
		chromedp.Click(chromedp.CSS("#back")),
		waitQuery(q(choices[:len(choices)-1]...)),
		chromedp.Click(chromedp.CSS(`#steps li[data-tick="3"]`)),
		waitQuery(q(choices[:3]...))))
	assertMatches(t, ctx2, reference(t, dmutex.RicartAgrawala, 3, seed, choices[:3], dmutex.SimConfig{}).World(), "jump to step 3")
}

// TestBrowserPlay: a seeded run played to the end shows the counts that
// Stats gives for the same seed.
func TestBrowserPlay(t *testing.T) {
	ctx := tab(t)
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	const seed = 7
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/?alg=ricart-agrawala&n=3&seed="+strconv.Itoa(seed)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.Click(chromedp.CSS("#all-request")),
		waitQuery(stateQuery(dmutex.RicartAgrawala, 3, seed, "r0", "r1", "r2")),
		chromedp.SetValue(chromedp.CSS("#speed"), "20"),
		chromedp.Click(chromedp.CSS("#play")),
		poll(`document.querySelector('#status').textContent.includes('nothing left to deliver') &&
			document.querySelector('#play').textContent.includes('play')`),
	))
	counts, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`Object.fromEntries(
		[...document.querySelectorAll('#counts tr[data-kind], #total, #entries')].map(tr =>
			[tr.dataset.kind || tr.id, tr.querySelector('.sent').textContent]))`))
	require.NoError(t, err)

	sim, err := dmutex.NewSimulation(dmutex.RicartAgrawala, 3, dmutex.SimConfig{Seed: uint64(seed)})
	require.NoError(t, err)
	for p := range 3 {
		require.NoError(t, sim.Request(p))
	}
	require.NoError(t, sim.Run())
	st := sim.Stats()
	require.Equal(t, uint64(3), st.Entries)
	assert.Equal(t, strconv.FormatUint(st.Entries, 10), counts["entries"])
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#status")))
	require.NoError(t, err)
	assert.Contains(t, status, " · 3 entries · ", "the status line counts the entries")
	assert.Equal(t, strconv.FormatUint(st.Messages, 10), counts["total"])
	for k, v := range st.ByKind {
		assert.Equal(t, strconv.FormatUint(v, 10), counts[k], k)
	}
	for k, v := range counts {
		if k != "entries" && k != "total" {
			assert.Equal(t, strconv.FormatUint(st.ByKind[k], 10), v, k)
		}
	}
}

// TestBrowserCounterexample: the check button loads the model checker's
// counterexample for a variant, and the page highlights the violation and
// the steps that led to it.
func TestBrowserCounterexample(t *testing.T) {
	ctx := tab(t)
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	res, err := dmutex.Check(context.Background(), dmutex.CheckConfig{Variant: "ricart-agrawala-tie-reply"})
	require.NoError(t, err)
	require.NotNil(t, res.Violation)
	steps := len(res.Violation.Transitions)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.SetValue(chromedp.CSS("#variant"), "ricart-agrawala-tie-reply"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#variant').dispatchEvent(new Event('change')), undefined`),
		chromedp.Click(chromedp.CSS("#apply")),
		poll(`(document.body.dataset.query || '').includes('variant=ricart-agrawala-tie-reply')`),
		chromedp.Click(chromedp.CSS("#check")),
		chromedp.WaitVisible(chromedp.CSS("#violation")),
	))
	banner, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#violation")))
	require.NoError(t, err)
	count := func(sel string) int {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		require.NoError(t, err)
		return n
	}
	cause, broke, brokeCols := count("#steps li.cause"), count("#steps li.broke"), count("#diagram rect.broke")
	assert.Contains(t, banner, "Violation at step "+strconv.Itoa(steps))
	_, what, _ := strings.Cut(res.Violation.Message, ": step 6: ")
	assert.Contains(t, banner, what)
	assert.Equal(t, steps, cause, "every step of the counterexample is highlighted")
	assert.Equal(t, 1, broke, "the step that broke the promise stands out")
	assert.Equal(t, 1, brokeCols, "and so does its column on the diagram")
}

// TestBrowserNaiveCounterexample: the check button loads the model
// checker's counterexample for centralized-naive-failover, a crash and a
// suspicion included, and the page highlights the violation, draws the
// suspicion on the suspecter's lane, and both peers inside at once.
func TestBrowserNaiveCounterexample(t *testing.T) {
	ctx := tab(t)
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	const name = "centralized-naive-failover"
	res, err := dmutex.Check(context.Background(), dmutex.CheckConfig{Variant: name, StopAtDeadlock: true})
	require.NoError(t, err)
	require.NotNil(t, res.Violation)
	require.Equal(t, "safety", res.Violation.Property)
	trace := res.Violation.Transitions
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.SetValue(chromedp.CSS("#variant"), name),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#variant').dispatchEvent(new Event('change')), undefined`),
		chromedp.Click(chromedp.CSS("#apply")),
		poll(`(document.body.dataset.query || '').includes('variant=`+name+`')`),
		chromedp.Click(chromedp.CSS("#check")),
		chromedp.WaitVisible(chromedp.CSS("#violation")),
	))
	query, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.query`))
	require.NoError(t, err)
	assert.Contains(t, query, "detector=perfect", "the variant's detector")
	assert.Contains(t, query, "recovery=1", "and its recovery")
	assert.Contains(t, query, "c="+strings.Join(trace, "."))
	banner, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#violation")))
	require.NoError(t, err)
	assert.Contains(t, banner, "Violation at step "+strconv.Itoa(len(trace)))
	_, what, _ := strings.Cut(res.Violation.Message, fmt.Sprintf(": step %d: ", len(trace)))
	require.NotEmpty(t, what, res.Violation.Message)
	assert.Contains(t, banner, what)
	count := func(sel string) int {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		require.NoError(t, err)
		return n
	}
	assert.Equal(t, len(trace), count("#steps li.cause"), "every step of the counterexample is highlighted")
	assert.Equal(t, 1, count("#steps li.broke"), "the step that broke the promise stands out")
	assert.Equal(t, 1, count("#diagram rect.broke"), "and so does its column on the diagram")
	for i, id := range trace {
		var p, q int
		if _, err := fmt.Sscanf(id, "s%d-%d", &p, &q); err == nil {
			assert.Equal(t, 1, count(fmt.Sprintf(`#diagram g.suspicion[data-peer="%d"][data-target="%d"][data-tick="%d"]`, p, q, i+1)),
				"%s is drawn on P%d's lane at step %d", id, p, i+1)
		}
	}
	assert.Equal(t, strings.Count(strings.Join(trace, " "), "s"), count("#diagram g.suspicion"))
	inside, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...new Set([...document.querySelectorAll('#diagram rect.cs.open')].map(r => r.dataset.peer))]`))
	require.NoError(t, err)
	assert.Len(t, inside, 2, "two peers are inside at the end: %v", inside)
	assert.Zero(t, count("#peers button.suspect, #peers button.trust"), "no detector choice after a violation")
}

// TestBrowserSuspectByHand: with an imperfect detector chosen in the
// form, a click makes a peer suspect a live one, and after it, and after
// the click that trusts it again, the diagram and the state panels are
// the World's of a Simulation given the same choices.
func TestBrowserSuspectByHand(t *testing.T) {
	ctx := tab(t)
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	const seed = 2
	q := func(choices ...string) string {
		return (&state{Alg: dmutex.RicartAgrawala, N: 3, Seed: seed, Recovery: true, Detector: dmutex.DetectorImperfect, False: 1,
			Choices: choices}).query()
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/?alg=ricart-agrawala&n=3&seed=2"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.SetValue(chromedp.CSS("#detector"), "imperfect"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#detector').dispatchEvent(new Event('change')), undefined`),
		chromedp.WaitVisible(chromedp.CSS("#false")),
		chromedp.SetValue(chromedp.CSS("#false"), "1"),
		chromedp.Click(chromedp.CSS("#recovery")),
		chromedp.Click(chromedp.CSS("#apply")),
		waitQuery(q()),
	))
	sim, err := dmutex.NewSimulation(dmutex.RicartAgrawala, 3, dmutex.SimConfig{Seed: uint64(seed), Detector: &dmutex.Detector{Kind: dmutex.DetectorImperfect, FalseSuspicions: 1}}, dmutex.WithRecovery())
	require.NoError(t, err)
	w := sim.World()
	count := func(sel string) int {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		require.NoError(t, err)
		return n
	}
	assert.Equal(t, 6, count("#peers button.suspect"), "each peer may suspect each other one")
	choices := []string{"r0"}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`.peer[data-peer="0"] button.request`)),
		waitQuery(q(choices...))))
	require.NoError(t, sim.Request(0))
	for _, id := range []string{"s1-0", "u1-0"} {
		choices = append(choices, id)
		var p, target int
		_, err := fmt.Sscanf(id[1:], "%d-%d", &p, &target)
		require.NoError(t, err)
		kind := map[byte]string{'s': "suspect", 'u': "trust"}[id[0]]
		require.NoError(t, chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(fmt.Sprintf(`.peer[data-peer="%d"] button.%s[data-target="%d"]`, p, kind, target))),
			waitQuery(q(choices...))), "click %s", id)
		tr, ok := w.Find(id)
		require.True(t, ok, id)
		_, err = w.Apply(tr)
		require.NoError(t, err)
		assertMatches(t, ctx, w, strings.Join(choices, "."))
		if id[0] == 's' {
			assert.Zero(t, count("#peers button.suspect"), "the bound of one false suspicion is used up")
			assert.Equal(t, 1, count(`.peer[data-peer="1"] button.trust[data-target="0"]`), "P1 may trust P0 again")
			assert.Equal(t, 1, count(`#diagram g.suspicion[data-peer="1"][data-target="0"]`), "the suspicion is drawn")
			text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.peer[data-peer="1"] p.suspects`)))
			require.NoError(t, err)
			assert.Equal(t, "suspects P0", text)
		} else {
			assert.Zero(t, count("#peers button.trust"))
			assert.Zero(t, count("#peers p.suspects"))
			assert.Equal(t, 1, count(`#diagram g.trust[data-peer="1"][data-target="0"]`), "the trust is drawn")
		}
	}
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#status")))
	require.NoError(t, err)
	assert.Contains(t, status, "false suspicions 1 of 1")
}

// TestBrowserFaultButtons: the crash, partition and heal buttons make
// the choices the Simulation's Crash, Partition and Heal replay, and the
// page shows the world they give.
func TestBrowserFaultButtons(t *testing.T) {
	ctx := tab(t)
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	choices := []string{"r0", "r1", "r2"}
	q := func() string { return stateQuery(dmutex.RicartAgrawala, 3, 1, choices...) }
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/?alg=ricart-agrawala&n=3&seed=1"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.Click(chromedp.CSS("#all-request")),
		waitQuery(q())))
	choices = append(choices, "d1")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#inflight li.deliverable[data-seq="1"]`)),
		waitQuery(q())))
	choices = append(choices, "c2")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`.peer[data-peer="2"] button.crash`)),
		waitQuery(q())))
	choices = append(choices, "p0_1-2")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#groups"), "0 | 1, 2"),
		chromedp.Click(chromedp.CSS("#partition")),
		waitQuery(q())))
	choices = append(choices, "h")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS("#heal")),
		waitQuery(q())))
	w := reference(t, dmutex.RicartAgrawala, 3, 1, choices, dmutex.SimConfig{}).World()
	assertMatches(t, ctx, w, strings.Join(choices, "."))
	require.True(t, w.Peer(2).Crashed)
	lost, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#diagram g.msg-g.lost').length`))
	require.NoError(t, err)
	want := 0
	for _, e := range w.Events() {
		if e.Kind == dmutex.EventLost {
			want++
		}
	}
	assert.Positive(t, want, "the crash and the partition lose messages in flight")
	assert.Equal(t, want, lost, "every lost message is drawn as lost")
}

// TestBrowserBadLink: a link that does not replay says why, over a new
// run, instead of a blank page.
func TestBrowserBadLink(t *testing.T) {
	ctx := tab(t)
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/?alg=ricart-agrawala&n=3&c=r0.d9"),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`)),
		chromedp.WaitVisible(chromedp.CSS("#error"))))
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#error")))
	require.NoError(t, err)
	assert.Contains(t, msg, `choice 1 "d9": message 9 is not in flight`)
	peers, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#peers .peer').length`))
	require.NoError(t, err)
	assert.Equal(t, 3, peers, "the new run is drawn")
}

// TestScreenshot saves a picture of the lab mid-run, for the README:
//
//	go test ./cmd/dmutexlab -run TestScreenshot -dmutexlab.screenshot $PWD/docs/dmutexlab.png
//
// -dmutexlab.screenshot.query pictures another run, such as a naive
// variant's counterexample.
func TestScreenshot(t *testing.T) {
	if *screenshot == "" {
		t.Skip("no -dmutexlab.screenshot file (or DMUTEXLAB_SCREENSHOT) given")
	}
	ctx := tab(t)
	srv := httptest.NewServer(newHandler())
	defer srv.Close()
	q := *screenshotQuery
	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(1400, 680),
		chromedp.Navigate(srv.URL+"/?"+q),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="1"]`))))
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(*screenshot, png, 0o644))
}
