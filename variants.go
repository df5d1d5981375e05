package dmutex

import (
	"fmt"
	"slices"
	"strings"
)

// A Variant is a version of an algorithm that the textbooks warn about,
// kept as teaching content: a name, what it teaches, and the smallest
// configuration in which Check refutes it. SimConfig.Variant,
// WorldConfig.Variant and CheckConfig.Variant select one; a Cluster and
// NewPeer take none, since a variant is broken on purpose.
//
// A variant is the real machine wrapped (variants.go): the wrapper
// rewrites the machine's output or intercepts one event, so that the
// machine files hold only the algorithms.
type Variant struct {
	Name      string
	Algorithm Algorithm
	Teaches   string // one sentence: what goes wrong, and why

	// The smallest configuration that shows the flaw, Check's defaults.
	N        int
	Requests int
	Network  Network
	Faults   CheckFaults
	Detector Detector
	Options  []Option // such as voting sets; added before the caller's

	// unordered lets the variant run over a reordering network although
	// its algorithm needs FIFO channels.
	unordered bool
	// wrap turns peer id's real machine into the variant's; nil keeps it.
	wrap func(m machine) machine
}

// variantList is the list behind Variants. Adding one is an entry here and,
// unless it is only a configuration, a small wrapper type below.
var variantList = []Variant{
	{
		Name:      "lamport-unordered",
		Algorithm: Lamport,
		Teaches:   "Lamport's entry rule (every other peer has sent something later than my request) is sound only over FIFO channels: a reply that overtakes its sender's older request lets two peers in.",
		N:         3, Requests: 1, Network: NetworkUnordered,
		unordered: true,
	},
	{
		Name:      "ricart-agrawala-tie-reply",
		Algorithm: RicartAgrawala,
		Teaches:   "Ricart-Agrawala must break timestamp ties by peer id: two peers that request with the same timestamp and each reply to the other both enter.",
		N:         2, Requests: 1, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &raTieReply{m.(*ricart)} },
	},
	{
		Name:      "maekawa-no-inquire",
		Algorithm: Maekawa,
		Teaches:   "Maekawa without INQUIRE, FAILED and RELINQUISH deadlocks: three requests that each hold one vote of the others' sets wait for each other in a cycle.",
		N:         3, Requests: 1, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &mkNoInquire{m.(*maekawa)} },
	},
	{
		Name:      "maekawa-textbook-failed",
		Algorithm: Maekawa,
		Teaches:   "Maekawa's FAILED sent only to a request as it arrives deadlocks with four peers on the grid sets: a request displaced later by a better one never hears FAILED, keeps its other votes and sits on its INQUIRE.",
		N:         4, Requests: 1, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &mkTextbookFailed{maekawa: m.(*maekawa)} },
	},
	{
		Name:      "maekawa-yield-unheld",
		Algorithm: Maekawa,
		Teaches:   "Over reordering channels an INQUIRE can overtake the LOCKED it asks about: a requester that answers it at once gives back a vote it does not hold yet, then counts the LOCKED when it arrives, so one vote serves two requesters and both enter.",
		N:         3, Requests: 1, Network: NetworkUnordered,
		unordered: true,
		wrap:      func(m machine) machine { return &mkYieldUnheld{m.(*maekawa)} },
	},
	{
		Name:      "agrawal-el-abbadi-yield-unheld",
		Algorithm: AgrawalElAbbadi,
		Teaches:   "Tree quorums need FIFO channels as Maekawa's voting does: over reordering channels an INQUIRE that overtakes its LOCKED, answered at once, gives back a vote not yet held, which then counts when it arrives, and two peers enter.",
		N:         3, Requests: 1, Network: NetworkUnordered,
		unordered: true,
		wrap:      func(m machine) machine { return &mkYieldUnheld{&m.(*agrawalElAbbadi).maekawa} },
	},
	{
		Name:      "agrawal-el-abbadi-keep-votes",
		Algorithm: AgrawalElAbbadi,
		Teaches:   "Tree quorums go on around a crashed peer only if its voters take their votes back: a voter that keeps its vote with a peer it suspects stays safe under false suspicions, but a peer that crashes holding a vote blocks every quorum through that voter, and the survivors wait for ever even with a perfect detector.",
		N:         3, Requests: 1, Network: NetworkFIFO,
		Faults:   CheckFaults{Crash: true},
		Detector: Detector{Kind: DetectorPerfect},
		Options:  []Option{WithRecovery()},
		wrap:     func(m machine) machine { return &aeaKeepVotes{m.(*agrawalElAbbadi)} },
	},
	{
		Name:      "suzuki-kasami-outdated-token",
		Algorithm: SuzukiKasami,
		Teaches:   "Suzuki-Kasami must not send the token for an outdated request (RN[j] <= LN[j]): a late copy of an already served request pulls the token to a peer that no longer wants it, and a request waits for ever or the order of service breaks.",
		N:         3, Requests: 2, Network: NetworkUnordered,
		wrap: func(m machine) machine { return &skOutdated{m.(*suzukiKasami)} },
	},
	{
		Name:      "ricart-agrawala-naive-exclusion",
		Algorithm: RicartAgrawala,
		Teaches:   "Crash exclusion must remember whom it suspects: a peer that only stops waiting for the request outstanding when the suspicion comes, and forgets it, waits for ever for the crashed peer's reply to its next request.",
		N:         3, Requests: 1, Network: NetworkFIFO,
		Faults:   CheckFaults{Crash: true},
		Detector: Detector{Kind: DetectorPerfect},
		wrap:     func(m machine) machine { return &raNaiveExclusion{m.(*ricart)} },
	},
	{
		Name:      "suzuki-kasami-naive-regeneration",
		Algorithm: SuzukiKasami,
		Teaches:   "Token regeneration must wait for the survivors: a coordinator that makes a new token as soon as it suspects a peer, without asking whether the token is alive elsewhere, creates a second token while a live holder is inside, and two peers enter even with a perfect detector.",
		N:         3, Requests: 1, Network: NetworkFIFO,
		Faults:   CheckFaults{Crash: true},
		Detector: Detector{Kind: DetectorPerfect},
		Options:  []Option{WithRecovery()},
		wrap:     func(m machine) machine { return &skNaiveRegeneration{m.(*suzukiKasami)} },
	},
	{
		Name:      "centralized-naive-failover",
		Algorithm: Centralized,
		Teaches:   "A new coordinator must rebuild before it grants: one that grants as soon as it takes over does not know that the old coordinator's grantee is still inside, and lets a second peer in.",
		N:         3, Requests: 1, Network: NetworkFIFO,
		Faults:   CheckFaults{Crash: true},
		Detector: Detector{Kind: DetectorPerfect},
		Options:  []Option{WithRecovery()},
		wrap:     func(m machine) machine { return &cnNaiveFailover{m.(*centralized)} },
	},
	{
		Name:      "roucairol-carvalho-keep-granted",
		Algorithm: RoucairolCarvalho,
		Teaches:   "Roucairol-Carvalho's peer keeps a permission only until it gives it away: one that still counts it after its reply re-enters without asking back while the peer it gave it to is inside.",
		N:         2, Requests: 1, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &rcKeepGranted{m.(*roucairol)} },
	},
	{
		Name:      "roucairol-carvalho-no-ask-back",
		Algorithm: RoucairolCarvalho,
		Teaches:   "A waiting Roucairol-Carvalho peer that gives a permission it held to an older request must ask for it back: its request went only to the peers whose permission it lacked, so without a new one it waits for ever.",
		N:         3, Requests: 2, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &rcNoAskBack{m.(*roucairol)} },
	},
	{
		Name:      "singhal-dynamic-forget-reply",
		Algorithm: SinghalDynamic,
		Teaches:   "A requesting Singhal peer that replies to an older request must put its requester in its request set: one that forgets it enters without that peer's reply, while the peer it replied to enters too.",
		N:         3, Requests: 1, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &sdForgetReply{m.(*singhalDynamic)} },
	},
	{
		Name:      "singhal-dynamic-no-request-back",
		Algorithm: SinghalDynamic,
		Teaches:   "A requesting Singhal peer that replies to an older request and puts its requester in its request set must also send it its own request: its request went only to its old request set, so without a new one it waits for ever for a reply.",
		N:         3, Requests: 1, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &sdNoRequestBack{m.(*singhalDynamic)} },
	},
	{
		Name:      "naimi-trehel-no-next",
		Algorithm: NaimiTrehel,
		Teaches:   "Naimi-Trehel's root must remember in NEXT the request it cannot serve yet: a root that is inside or waiting, and only points LAST at the requester, leaves without passing the token on, and the requester waits for ever.",
		N:         2, Requests: 1, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &ntNoNext{m.(*naimiTrehel)} },
	},
	{
		Name:      "lodha-kshemkalyani-unordered",
		Algorithm: LodhaKshemkalyani,
		Teaches:   "Lodha-Kshemkalyani needs FIFO channels: a request that overtakes the reply its sender sent before it looks concurrent to the receiver, which queues it as its own reply instead of answering it when it leaves, and its sender waits for ever.",
		N:         3, Requests: 1, Network: NetworkUnordered,
		unordered: true,
	},
	{
		Name:      "lodha-kshemkalyani-no-release",
		Algorithm: LodhaKshemkalyani,
		Teaches:   "Lodha-Kshemkalyani's leaving peer must send the release (the paper's FLUSH) to the next concurrent request in its queue: that requester heard from it by its request alone, and waits for ever for the word that it has left.",
		N:         2, Requests: 1, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &lkNoRelease{m.(*lodha)} },
	},
	{
		Name:      "lodha-kshemkalyani-queue-served",
		Algorithm: LodhaKshemkalyani,
		Teaches:   "A Lodha-Kshemkalyani peer must not queue a request older than one it knows was served: it was served too, its release went elsewhere, and it heads the queue for ever.",
		N:         3, Requests: 1, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &lkQueueServed{m.(*lodha)} },
	},
	{
		Name:      "ricart-agrawala-token-outdated",
		Algorithm: RicartAgrawalaToken,
		Teaches:   "Ricart and Agrawala's idle holder must send the token only for a request above the one the token records as served: one that answers every request it receives sends the token for a late copy of a request already served, to a peer that no longer wants it, and a waiting request is never served.",
		N:         3, Requests: 1, Network: NetworkUnordered,
		wrap: func(m machine) machine { return &ratOutdated{m.(*ricartToken)} },
	},
	{
		Name:      "singhal-heuristic-textbook",
		Algorithm: SinghalHeuristic,
		Teaches:   "Singhal's heuristic release rule, as published, lets the leaving holder copy the token's N over its own R: two peers can then each believe the other neither requests nor holds the token, a request goes only to peers that will never hold it, and the token rests idle elsewhere for ever.",
		N:         3, Requests: 2, Network: NetworkFIFO,
		wrap: func(m machine) machine { return &shTextbook{m.(*singhal)} },
	},
}

// Variants returns every variant, in a fixed order. The slice is the
// caller's.
func Variants() []Variant { return slices.Clone(variantList) }

// LookupVariant returns the variant named name; an unknown name is an
// error wrapping ErrInvalidConfig that lists the known ones.
func LookupVariant(name string) (*Variant, error) {
	for i := range variantList {
		if variantList[i].Name == name {
			v := variantList[i]
			return &v, nil
		}
	}
	names := make([]string, len(variantList))
	for i, v := range variantList {
		names[i] = v.Name
	}
	return nil, fmt.Errorf("%w: unknown variant %q (want one of %s)", ErrInvalidConfig, name, strings.Join(names, ", "))
}

// setVariant has c run the variant named name instead of the real
// algorithm, which must be the variant's (SimConfig.Variant,
// WorldConfig.Variant, CheckConfig.Variant).
func (c *config) setVariant(name string) error {
	v, err := LookupVariant(name)
	if err != nil {
		return err
	}
	if v.Algorithm != c.alg {
		return fmt.Errorf("%w: variant %s is of %v, not %v", ErrInvalidConfig, name, v.Algorithm, c.alg)
	}
	c.variant = v
	if v.unordered {
		c.sim.unsafe = true
	}
	return nil
}

// withRuntimeVariant runs a variant in a Cluster, for the tests that show
// the runtime's own tests catch a variant. Not for real use: New and
// NewPeer take no variant, since a variant is broken on purpose.
func withRuntimeVariant(name string) Option {
	return Option{
		name:  "withRuntimeVariant",
		where: forAll,
		apply: func(c *config) error { return c.setVariant(name) },
	}
}

// Ricart-Agrawala replying on a timestamp tie.
type raTieReply struct{ *ricart }

func (r *raTieReply) step(ev event, out *output) {
	if m := ev.msg; ev.kind == evMessage && m.Kind == KindRequest && !r.implicit &&
		r.state == raWanted && m.TS == r.ts {
		// The real machine defers to the smaller id; this one replies.
		r.clock = max(r.clock, m.TS)
		out.send(Message{Kind: KindReply, From: r.id, To: m.From, TS: r.clock, Ref: m.TS})
		return
	}
	r.ricart.step(ev, out)
}

func (r *raTieReply) clone() machine { return &raTieReply{r.ricart.clone().(*ricart)} }

// Ricart-Agrawala with a one-shot crash exclusion: a suspicion counts as
// the suspected peer's reply to the request outstanding, if any, and is
// then forgotten.
type raNaiveExclusion struct{ *ricart }

func (r *raNaiveExclusion) step(ev event, out *output) {
	switch ev.kind {
	case evSuspect:
		if r.state == raWanted {
			r.grant(ev.msg.From, out)
		}
		return
	case evTrust:
		return
	}
	r.ricart.step(ev, out)
}

func (r *raNaiveExclusion) clone() machine {
	return &raNaiveExclusion{r.ricart.clone().(*ricart)}
}

// Centralized failover without the rebuild: the new coordinator takes
// its term and grants at once, from the requests it has, without waiting
// for the survivors' reports.
type cnNaiveFailover struct{ *centralized }

func (c *cnNaiveFailover) step(ev event, out *output) {
	c.centralized.step(ev, out)
	if c.collecting {
		c.collecting = false
		c.grantNext(out)
	}
}

func (c *cnNaiveFailover) clone() machine {
	return &cnNaiveFailover{c.centralized.clone().(*centralized)}
}

// Maekawa without INQUIRE and FAILED: the voter only queues, and so no
// requester ever yields.
type mkNoInquire struct{ *maekawa }

func (m *mkNoInquire) step(ev event, out *output) {
	m.maekawa.step(ev, out)
	out.msgs = slices.DeleteFunc(out.msgs, func(x Message) bool {
		return x.Kind == KindInquire || x.Kind == KindFailed
	})
}

func (m *mkNoInquire) clone() machine { return &mkNoInquire{m.maekawa.clone().(*maekawa)} }

// Maekawa with the textbook FAILED rule: FAILED only to the request that
// just arrived, never to a queued one that a better request displaces.
type mkTextbookFailed struct{ *maekawa }

func (m *mkTextbookFailed) step(ev event, out *output) {
	arrived := -1 // the requester whose REQUEST arrives in this step
	if ev.kind == evMessage && ev.msg.Kind == KindRequest {
		arrived = ev.msg.From
	}
	m.maekawa.step(ev, out)
	out.msgs = slices.DeleteFunc(out.msgs, func(x Message) bool {
		return x.Kind == KindFailed && x.To != arrived
	})
}

func (m *mkTextbookFailed) clone() machine {
	return &mkTextbookFailed{m.maekawa.clone().(*maekawa)}
}

// Maekawa answering an INQUIRE for a vote whose LOCKED has not arrived.
type mkYieldUnheld struct{ *maekawa }

func (m *mkYieldUnheld) step(ev event, out *output) {
	if x := ev.msg; ev.kind == evMessage && x.Kind == KindInquire && m.state == mkWanting && x.TS == m.ts {
		if k, ok := slices.BinarySearch(m.set, x.From); ok && m.votes[k] != voteLocked && m.losing() {
			m.clock = max(m.clock, x.TS, x.Ref)
			m.yield(k, out)
			for i := 0; i < len(m.local); i++ {
				m.receive(m.local[i], out)
			}
			m.local = m.local[:0]
			return
		}
	}
	m.maekawa.step(ev, out)
}

func (m *mkYieldUnheld) clone() machine { return &mkYieldUnheld{m.maekawa.clone().(*maekawa)} }

// Tree quorums whose voters never take a vote back from a peer they
// suspect: a requester still builds its quorum around the peers it
// suspects, and a voter sets aside the waiting requests of a peer it
// suspects, but its vote stays with its grantee whatever the detector
// says.
type aeaKeepVotes struct{ *agrawalElAbbadi }

func (a *aeaKeepVotes) step(ev event, out *output) {
	if j := ev.msg.From; (ev.kind == evSuspect || ev.kind == evTrust) && j >= 0 && j < a.n && j != a.id {
		a.suspected[j] = ev.kind == evSuspect
		if a.suspected[j] {
			a.setAside(j) // but the vote stays where it is
		} else {
			a.unpark(j, out)
		}
		a.onSuspicion(a.suspected[j], j, out)
		for i := 0; i < len(a.local); i++ {
			a.receive(a.local[i], out)
		}
		a.local = a.local[:0]
		a.enterOnQuorum(out)
		return
	}
	a.agrawalElAbbadi.step(ev, out)
}

func (a *aeaKeepVotes) clone() machine {
	return &aeaKeepVotes{a.agrawalElAbbadi.clone().(*agrawalElAbbadi)}
}

// Suzuki-Kasami sending the idle token for an outdated request.
type skOutdated struct{ *suzukiKasami }

func (s *skOutdated) step(ev event, out *output) {
	if m := ev.msg; ev.kind == evMessage && m.Kind == KindRequest && s.token != nil && !s.inside {
		s.rn[m.From] = max(s.rn[m.From], m.TS)
		s.sendToken(m.From, out)
		return
	}
	s.suzukiKasami.step(ev, out)
}

func (s *skOutdated) clone() machine {
	return &skOutdated{s.suzukiKasami.clone().(*suzukiKasami)}
}

// Suzuki-Kasami regenerating the token the moment its round begins, from
// its own knowledge alone: it waits for no status.
type skNaiveRegeneration struct{ *suzukiKasami }

func (s *skNaiveRegeneration) step(ev event, out *output) {
	s.suzukiKasami.step(ev, out)
	if s.collecting {
		s.regenerate(out)
	}
}

func (s *skNaiveRegeneration) clone() machine {
	return &skNaiveRegeneration{s.suzukiKasami.clone().(*suzukiKasami)}
}

// Roucairol-Carvalho still counting a permission it gave away.
type rcKeepGranted struct{ *roucairol }

func (r *rcKeepGranted) step(ev event, out *output) {
	n := len(out.msgs)
	r.roucairol.step(ev, out)
	for _, m := range out.msgs[n:] {
		if m.Kind == KindReply && !r.perm[m.To] {
			r.perm[m.To] = true
			r.nperm++
		}
	}
}

func (r *rcKeepGranted) clone() machine { return &rcKeepGranted{r.roucairol.clone().(*roucairol)} }

// Roucairol-Carvalho not asking back for a permission it gave to an
// older request while it waits: the only requests it sends while handling
// a message are those.
type rcNoAskBack struct{ *roucairol }

func (r *rcNoAskBack) step(ev event, out *output) {
	n := len(out.msgs)
	r.roucairol.step(ev, out)
	if ev.kind == evMessage {
		out.msgs = append(out.msgs[:n], slices.DeleteFunc(out.msgs[n:], func(m Message) bool { return m.Kind == KindRequest })...)
	}
}

func (r *rcNoAskBack) clone() machine { return &rcNoAskBack{r.roucairol.clone().(*roucairol)} }

// Naimi-Trehel forgetting NEXT: the root that cannot serve a request
// only points LAST at it.
type ntNoNext struct{ *naimiTrehel }

func (n *ntNoNext) step(ev event, out *output) {
	n.naimiTrehel.step(ev, out)
	n.next = -1
}

func (n *ntNoNext) clone() machine { return &ntNoNext{n.naimiTrehel.clone().(*naimiTrehel)} }

// Lodha-Kshemkalyani leaving without the release to the next concurrent
// request.
type lkNoRelease struct{ *lodha }

func (l *lkNoRelease) step(ev event, out *output) {
	n := len(out.msgs)
	l.lodha.step(ev, out)
	out.msgs = append(out.msgs[:n], slices.DeleteFunc(out.msgs[n:], func(m Message) bool { return m.Kind == KindRelease })...)
}

func (l *lkNoRelease) clone() machine { return &lkNoRelease{l.lodha.clone().(*lodha)} }

// Lodha-Kshemkalyani queueing every concurrent request, even one older
// than a request known to be served: the machine is stepped with that
// knowledge hidden.
type lkQueueServed struct{ *lodha }

func (l *lkQueueServed) step(ev event, out *output) {
	if ev.kind != evMessage || ev.msg.Kind != KindRequest {
		l.lodha.step(ev, out)
		return
	}
	served := l.served
	l.served = lkEntry{}
	l.lodha.step(ev, out)
	if compareLK(served, l.served) > 0 {
		l.served = served
	}
}

func (l *lkQueueServed) clone() machine { return &lkQueueServed{l.lodha.clone().(*lodha)} }

// Ricart and Agrawala's token sent for any request its idle holder
// receives, outdated or not.
type ratOutdated struct{ *ricartToken }

func (r *ratOutdated) step(ev event, out *output) {
	if m := ev.msg; ev.kind == evMessage && m.Kind == KindRequest && r.token != nil && !r.inside &&
		m.From >= 0 && m.From < r.n && m.From != r.id {
		r.req[m.From] = max(r.req[m.From], m.TS)
		out.send(Message{Kind: KindToken, From: r.id, To: m.From, Token: r.token})
		r.token = nil
		return
	}
	r.ricartToken.step(ev, out)
}

func (r *ratOutdated) clone() machine { return &ratOutdated{r.ricartToken.clone().(*ricartToken)} }

// Singhal's dynamic algorithm, a requesting peer that replies to an older
// request without putting the requester in its request set: every reply
// it sends while it requests leaves R_i as it was, and asks nothing back.
type sdForgetReply struct{ *singhalDynamic }

func (s *sdForgetReply) step(ev event, out *output) {
	wanted := s.state == raWanted && !s.trying
	before := slices.Clone(s.rset)
	n := len(out.msgs)
	s.singhalDynamic.step(ev, out)
	if !wanted || ev.kind != evMessage || ev.msg.Kind != KindRequest {
		return
	}
	for _, m := range out.msgs[n:] {
		if m.Kind == KindReply && !before[m.To] {
			s.remove(m.To)
		}
	}
	out.msgs = append(out.msgs[:n], slices.DeleteFunc(out.msgs[n:], func(m Message) bool { return m.Kind == KindRequest })...)
}

func (s *sdForgetReply) clone() machine {
	return &sdForgetReply{s.singhalDynamic.clone().(*singhalDynamic)}
}

// Singhal's dynamic algorithm, a requesting peer that replies to an older
// request and puts the requester in R_i, but sends it no request: the only
// requests it sends while handling a message are those.
type sdNoRequestBack struct{ *singhalDynamic }

func (s *sdNoRequestBack) step(ev event, out *output) {
	n := len(out.msgs)
	s.singhalDynamic.step(ev, out)
	if ev.kind == evMessage {
		out.msgs = append(out.msgs[:n], slices.DeleteFunc(out.msgs[n:], func(m Message) bool { return m.Kind == KindRequest })...)
	}
}

func (s *sdNoRequestBack) clone() machine {
	return &sdNoRequestBack{s.singhalDynamic.clone().(*singhalDynamic)}
}

// Singhal's heuristic with the release rule as published: where the
// token's request number is at least the leaving peer's, the peer copies
// the token's state, N included. (The repaired machine's forgetting of the
// token's sender when the token arrives changes nothing here: this merge
// overwrites that entry before anything reads it.)
type shTextbook struct{ *singhal }

func (s *shTextbook) step(ev event, out *output) {
	if ev.kind != evRelease {
		s.singhal.step(ev, out)
		return
	}
	s.sv[s.id] = shNone
	s.setTSV(s.id, false)
	for j := range s.sv {
		if s.sn[j] > s.token.LN[j] {
			s.setTSV(j, s.sv[j] == shRequesting)
			s.token.LN[j] = s.sn[j]
			continue
		}
		s.sv[j] = shNone
		if s.tsv(j) {
			s.sv[j] = shRequesting
		}
		s.sn[j] = s.token.LN[j]
	}
	s.pass(out)
}

func (s *shTextbook) clone() machine { return &shTextbook{s.singhal.clone().(*singhal)} }
