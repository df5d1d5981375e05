package dmutexprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dmutex/dmutex"
	"github.com/dmutex/dmutex/dmutexprom"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scrape serves reg through promhttp and returns the text exposition.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// TestScrapeAfterKnownEntries runs entries whose message counts the
// Ricart-Agrawala paper gives, 2(n-1) per entry, and a timeout and a
// cancellation, then scrapes the registry and checks each series.
func TestScrapeAfterKnownEntries(t *testing.T) {
	const n, entries = 3, 4
	m := dmutexprom.New()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	c, err := dmutex.NewRicartAgrawala(n, dmutex.WithObserver(m))
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	p1 := c.Peer(1)
	for range entries {
		p1.Lock()
		p1.Unlock()
	}
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	require.ErrorIs(t, c.Peer(2).LockContext(expired), context.DeadlineExceeded)
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	require.ErrorIs(t, c.Peer(0).LockContext(cancelled), context.Canceled)
	p1.Lock()
	require.False(t, c.Peer(2).TryLock(), "peer 1 holds the lock")
	p1.Unlock()

	text := scrape(t, reg)
	// Peer 1 asked each of the 2 others once per entry (four, then the
	// hold that refuses peer 2's TryLock), and each answered: every reply
	// peer 1 waited for had arrived before it entered.
	for _, want := range []string{
		`dmutex_wait_seconds_count{peer="1"} 5`,
		`dmutex_hold_seconds_count{peer="1"} 5`,
		`dmutex_messages_total{direction="sent",kind="request",peer="1"} 10`,
		`dmutex_messages_total{direction="received",kind="reply",peer="1"} 10`,
		`dmutex_lock_failures_total{peer="2",reason="refused"} 1`,
		`dmutex_lock_failures_total{peer="2",reason="timeout"} 1`,
		`dmutex_lock_failures_total{peer="0",reason="canceled"} 1`,
		`dmutex_wait_seconds_count{peer="0"} 0`, // peer 0 never entered
	} {
		assert.Contains(t, text, want+"\n")
	}
	assert.NotContains(t, text, "dmutex_send_errors_total{", "no send failed")
	assert.Equal(t, uint64((n-1)*(entries+1)), c.Peer(1).Stats().ByKind["request"], "the peer's own count agrees")
}

// TestReason checks the reason labels, wrapped errors included.
func TestReason(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{context.DeadlineExceeded, dmutexprom.ReasonTimeout},
		{context.Canceled, dmutexprom.ReasonCanceled},
		{dmutex.ErrClosed, dmutexprom.ReasonClosed},
		{dmutex.ErrLocked, dmutexprom.ReasonRefused},
		{fmt.Errorf("x: %w", dmutex.ErrPeerUnreachable), dmutexprom.ReasonUnreachable},
		{errors.Join(errors.New("x"), dmutex.ErrClosed), dmutexprom.ReasonClosed},
		{errors.New("something else"), dmutexprom.ReasonOther},
	} {
		assert.Equal(t, tt.want, dmutexprom.Reason(tt.err), "%v", tt.err)
	}
}

// refusing refuses every send, so the first request of a lock fails.
type refusing struct{ dmutex.Transport }

func (refusing) Send(int, dmutex.Message) error { return errors.New("refused") }

// TestSendErrorsCounted checks that messages the transport refused are
// counted apart from those it took.
func TestSendErrorsCounted(t *testing.T) {
	m := dmutexprom.New()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	nw := dmutex.NewChanNetwork(3)
	defer func() { require.NoError(t, nw.Close()) }()
	p, err := dmutex.NewPeer(dmutex.RicartAgrawala, 0, 3, refusing{nw.Endpoint(0)}, dmutex.WithObserver(m))
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, p.LockContext(ctx), context.DeadlineExceeded)

	text := scrape(t, reg)
	assert.Contains(t, text, `dmutex_send_errors_total{kind="request",peer="0"} 2`+"\n")
	assert.False(t, strings.Contains(text, `direction="sent"`), "nothing was sent")
}

// TestMessageCountingAllocatesNothing checks that, once a series exists,
// counting a message, which a peer does under its mutex for every
// message, allocates nothing.
func TestMessageCountingAllocatesNothing(t *testing.T) {
	m := dmutexprom.New()
	m.Sent(3, 1, dmutex.KindRequest, nil)
	m.Received(3, 1, dmutex.KindReply)
	m.Acquired(3, time.Microsecond)
	allocs := testing.AllocsPerRun(1000, func() {
		m.Sent(3, 1, dmutex.KindRequest, nil)
		m.Received(3, 1, dmutex.KindReply)
		m.Acquired(3, time.Microsecond)
		m.Released(3, time.Microsecond)
	})
	assert.Zero(t, allocs)
}
