package dmutex

import "fmt"

// NewCentralized starts n peers of which peer 0 is the coordinator: it
// keeps the current holder and a FIFO queue of waiting peers, and the
// others ask it, as a lock server would be asked.
//
// Cost: 3 messages per entry by a peer other than the coordinator
// (REQUEST, GRANT, RELEASE); none for the coordinator's own entries.
// Synchronization delay: 2 messages (RELEASE, then GRANT). Channels: any
// order will do: a peer's next request may overtake its release, and the
// coordinator just queues it behind that release. Fairness: FIFO in the
// order requests reach the coordinator, and no starvation. There is no
// bound on overtaking: while a request is on its way to the coordinator,
// another peer may enter as often as it requests (Check finds (n-1)·r
// entries by others between a request and its entry for r requests per
// peer: n = 2 with r = 4, n = 3 with r = 1 to 3, n = 4 with r = 1 and 2). Failures: the coordinator is a single point of
// failure. If it crashes, no peer can enter again and the holder's release
// is lost; if a holder crashes, the lock is never released. A lost message
// blocks its requester, and a partition blocks every peer cut off from
// peer 0 while the coordinator's side goes on.
//
// TryLock: the coordinator decides at once, with no message for its own
// try. Another peer sends a try to the coordinator, which grants it if
// nobody holds the lock (then release as usual: 3 messages in all) and
// answers busy otherwise (2 messages: try, busy), keeping nothing.
func NewCentralized(n int, opts ...Option) (*Cluster, error) {
	return New(Centralized, n, opts...)
}

// centralized is the coordinator machine.
type centralized struct {
	id int

	// At every peer.
	wanting bool // our REQUEST is out (or queued locally at the coordinator)
	trying  bool // our TRY is out, not yet answered

	// At the coordinator only.
	holder int   // peer in the critical section, or -1
	queue  []int // waiting peers, oldest first
}

const coordinator = 0

func newCentralized(id, n int, _ *config) (machine, error) {
	return &centralized{id: id, holder: -1}, nil
}

func (c *centralized) step(ev event, out *output) {
	switch ev.kind {
	case evRequest:
		c.wanting = true
		if c.id == coordinator {
			c.ask(c.id, out)
		} else {
			out.send(Message{Kind: KindRequest, From: c.id, To: coordinator})
		}
	case evTry:
		switch {
		case c.id != coordinator:
			c.trying = true
			out.send(Message{Kind: KindTry, From: c.id, To: coordinator})
		case c.holder < 0:
			c.give(c.id, out)
		default:
			out.refuse()
		}
	case evRelease:
		if c.id == coordinator {
			c.free(out)
		} else {
			out.send(Message{Kind: KindRelease, From: c.id, To: coordinator})
		}
	case evMessage:
		m := ev.msg
		switch {
		case m.Kind == KindGrant && c.id != coordinator && (c.wanting || c.trying) && m.From == coordinator:
			c.wanting, c.trying = false, false
			out.enter()
		case m.Kind == KindBusy && c.id != coordinator && c.trying && m.From == coordinator:
			c.trying = false
			out.refuse()
		case m.Kind == KindRequest && c.id == coordinator:
			c.ask(m.From, out)
		case m.Kind == KindTry && c.id == coordinator:
			if c.holder < 0 {
				c.give(m.From, out)
			} else {
				out.send(Message{Kind: KindBusy, From: c.id, To: m.From})
			}
		case m.Kind == KindRelease && c.id == coordinator && m.From == c.holder:
			c.free(out)
		}
	}
}

// ask is the coordinator's handling of peer j's request.
func (c *centralized) ask(j int, out *output) {
	if c.holder >= 0 {
		c.queue = append(c.queue, j)
		return
	}
	c.give(j, out)
}

// free is the coordinator's handling of the holder's release.
func (c *centralized) free(out *output) {
	c.holder = -1
	if len(c.queue) > 0 {
		j := c.queue[0]
		c.queue = c.queue[1:]
		c.give(j, out)
	}
}

func (c *centralized) give(j int, out *output) {
	c.holder = j
	if j == c.id {
		c.wanting = false
		out.enter()
		return
	}
	out.send(Message{Kind: KindGrant, From: c.id, To: j})
}

// idleViolation reports what this peer still keeps once the cluster is at
// rest, with every request and try answered and nothing in flight.
func (c *centralized) idleViolation() string {
	switch {
	case c.wanting || c.trying:
		return "keeps a request"
	case c.holder >= 0 || len(c.queue) > 0:
		return fmt.Sprintf("keeps holder %d and queue %v", c.holder, c.queue)
	}
	return ""
}

// needs appends the peers a request can wait for (WithUnreachableAfter):
// the coordinator, or for the coordinator itself the current holder.
func (c *centralized) needs(buf []int) []int {
	switch {
	case c.id != coordinator:
		return append(buf, coordinator)
	case c.holder >= 0 && c.holder != c.id:
		return append(buf, c.holder)
	}
	return buf
}

func (c *centralized) clone() machine {
	d := *c
	d.queue = append([]int(nil), c.queue...)
	return &d
}

func (c *centralized) appendState(b []byte) []byte {
	b = appendBool(b, c.wanting)
	b = appendBool(b, c.trying)
	b = appendInt(b, c.holder)
	return appendInts(b, c.queue)
}

func (c *centralized) coordinatorID() int { return coordinator }

func (c *centralized) describe() []Field {
	fs := []Field{{"wanting", fmt.Sprint(c.wanting)}}
	if c.trying {
		fs = append(fs, Field{"trying", "true"})
	}
	if c.id == coordinator {
		holder := "none"
		if c.holder >= 0 {
			holder = fmt.Sprintf("P%d", c.holder)
		}
		fs = append(fs, Field{"holder", holder}, Field{"queue", describePeers(c.queue)})
	}
	return fs
}
