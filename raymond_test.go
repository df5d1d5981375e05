package dmutex

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newRaymondMachine(t *testing.T, id, n int) *raymond {
	t.Helper()
	cfg, err := newConfig(Raymond, n, forSimulation, nil)
	require.NoError(t, err)
	m, err := cfg.newMachine(Raymond, id, n)
	require.NoError(t, err)
	return m.(*raymond)
}

// heapDistance is the number of edges between peers a and b in the heap
// tree, found by walking the deeper one up until they meet.
func heapDistance(a, b int) int {
	d := 0
	for a != b {
		if a > b {
			a = (a - 1) / 2
		} else {
			b = (b - 1) / 2
		}
		d++
	}
	return d
}

func TestHeapDistance(t *testing.T) {
	tests := []struct{ a, b, want int }{
		{0, 0, 0}, {1, 0, 1}, {2, 1, 2}, {3, 0, 2}, {3, 4, 2}, {3, 5, 4}, {7, 2, 4}, {6, 2, 1},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, heapDistance(tt.a, tt.b), "%d-%d", tt.a, tt.b)
		assert.Equal(t, tt.want, heapDistance(tt.b, tt.a), "%d-%d", tt.b, tt.a)
	}
}

func TestRaymondStep(t *testing.T) {
	req := func(from int) event {
		return event{kind: evMessage, msg: Message{Kind: KindRequest, From: from}}
	}
	priv := func(from int) event {
		return event{kind: evMessage, msg: Message{Kind: KindPrivilege, From: from}}
	}
	// Peer 1 of 7 throughout: parent 0, children 3 and 4.
	tests := []struct {
		name       string
		setup      func(*raymond)
		ev         event
		wantMsgs   []Message
		wantEnter  bool
		wantHolder int
		wantAsked  bool
		wantQueue  []int
	}{
		{
			name:       "a request asks the parent once",
			ev:         event{kind: evRequest},
			wantMsgs:   []Message{{Kind: KindRequest, From: 1, To: 0}},
			wantHolder: 0, wantAsked: true, wantQueue: []int{1},
		},
		{
			name:       "a child's request behind an asked one is only queued",
			setup:      func(r *raymond) { r.queue, r.asked = []int{1}, true },
			ev:         req(3),
			wantHolder: 0, wantAsked: true, wantQueue: []int{1, 3},
		},
		{
			name:       "the idle holder enters with no message",
			setup:      func(r *raymond) { r.holder = 1 },
			ev:         event{kind: evRequest},
			wantEnter:  true,
			wantHolder: 1, wantQueue: []int{},
		},
		{
			name:       "the idle holder passes the privilege to a child that asks",
			setup:      func(r *raymond) { r.holder = 1 },
			ev:         req(4),
			wantMsgs:   []Message{{Kind: KindPrivilege, From: 1, To: 4}},
			wantHolder: 4, wantQueue: []int{},
		},
		{
			name:       "the holder in use only queues a request",
			setup:      func(r *raymond) { r.holder, r.using = 1, true },
			ev:         req(4),
			wantHolder: 1, wantQueue: []int{4},
		},
		{
			name:       "the privilege goes to the queue's head, and a request follows it for the rest",
			setup:      func(r *raymond) { r.queue, r.asked = []int{3, 1, 4}, true },
			ev:         priv(0),
			wantMsgs:   []Message{{Kind: KindPrivilege, From: 1, To: 3}, {Kind: KindRequest, From: 1, To: 3}},
			wantHolder: 3, wantAsked: true, wantQueue: []int{1, 4},
		},
		{
			name:       "the privilege enters a peer at the queue's head and keeps the rest waiting",
			setup:      func(r *raymond) { r.queue, r.asked = []int{1, 4}, true },
			ev:         priv(0),
			wantEnter:  true,
			wantHolder: 1, wantQueue: []int{4},
		},
		{
			name:       "release serves the queue",
			setup:      func(r *raymond) { r.holder, r.using, r.queue = 1, true, []int{0, 3} },
			ev:         event{kind: evRelease},
			wantMsgs:   []Message{{Kind: KindPrivilege, From: 1, To: 0}, {Kind: KindRequest, From: 1, To: 0}},
			wantHolder: 0, wantAsked: true, wantQueue: []int{3},
		},
		{
			name:       "release with nobody waiting keeps the privilege",
			setup:      func(r *raymond) { r.holder, r.using = 1, true },
			ev:         event{kind: evRelease},
			wantHolder: 1, wantQueue: []int{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRaymondMachine(t, 1, 7)
			if tt.setup != nil {
				tt.setup(r)
			}
			var out output
			r.step(tt.ev, &out)
			assert.Equal(t, tt.wantMsgs, out.msgs)
			assert.Equal(t, tt.wantEnter, out.entered, "entered")
			assert.Equal(t, tt.wantHolder, r.holder, "holder")
			assert.Equal(t, tt.wantAsked, r.asked, "asked")
			assert.Equal(t, tokNonNilInts(tt.wantQueue), tokNonNilInts(r.queue), "queue")
		})
	}
	t.Run("a second privilege panics", func(t *testing.T) {
		r := newRaymondMachine(t, 0, 3)
		assert.PanicsWithValue(t, "dmutex: raymond peer 0 received a second privilege from peer 2",
			func() { r.step(priv(2), &output{}) })
	})
}

func tokNonNilInts(s []int) []int {
	if s == nil {
		return []int{}
	}
	return s
}

func TestRaymondCloneAndState(t *testing.T) {
	r := newRaymondMachine(t, 1, 7)
	r.step(event{kind: evRequest}, &output{})
	c := r.clone().(*raymond)
	require.Equal(t, r.appendState(nil), c.appendState(nil))
	c.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 3}}, &output{})
	assert.Equal(t, []int{1}, r.queue, "a clone shares no queue with its original")
	assert.NotEqual(t, r.appendState(nil), c.appendState(nil))
}

// TestRaymondSequentialCounts takes the lock on one peer at a time: each
// entry costs a request and a privilege per edge between the requester
// and the previous holder.
func TestRaymondSequentialCounts(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 12} {
		t.Run("n="+strconv.Itoa(n), func(t *testing.T) {
			c := variant{alg: Raymond}.cluster(t, n)
			rng := rand.New(rand.NewPCG(uint64(n), 3))
			holder := 0
			for i := range 3 * n {
				id := (n - 1 - i%n + n) % n // leaves first, then at random
				if i >= n {
					id = rng.IntN(n)
				}
				before := c.Stats()
				p := c.Peer(id)
				lockWithin(t, p, 10*time.Second)
				p.Unlock()
				got := c.Stats().Sub(before)
				d := uint64(heapDistance(holder, id))
				want := map[string]uint64{}
				if d > 0 {
					want = map[string]uint64{"request": d, "privilege": d}
				}
				assert.Equal(t, uint64(1), got.Entries, "peer %d", id)
				assert.Equal(t, want, nonNil(got.ByKind), "peer %d after holder %d", id, holder)
				holder = id
			}
		})
	}
}

// TestRaymondLightLoadAverage measures messages per entry with one
// requester at a time, chosen at random, against twice the tree distance
// to the previous holder (which it must equal) and against 2·depth and
// log2 n.
func TestRaymondLightLoadAverage(t *testing.T) {
	for _, n := range []int{7, 32, 255, 1000} {
		t.Run("n="+strconv.Itoa(n), func(t *testing.T) {
			nw := newTokNet(t, Raymond, n, "")
			rng := rand.New(rand.NewPCG(uint64(n), 4))
			const entries = 400
			holder, path := 0, 0
			for range entries {
				id := rng.IntN(n)
				require.NoError(t, nw.request(id))
				require.NoError(t, nw.drain(nil, true, 4*n))
				require.NoError(t, nw.releaseAll())
				path += 2 * heapDistance(holder, id)
				holder = id
			}
			require.Equal(t, entries, nw.entries())
			assert.Equal(t, path, nw.total(), "each entry costs 2 x the distance")
			depth := 0
			for (1<<(depth+1))-1 < n {
				depth++
			}
			t.Logf("n=%d: %.2f messages per entry; tree depth %d, 2·depth %d, 4·depth (2 x diameter) %d",
				n, float64(nw.total())/entries, depth, 2*depth, 4*depth)
			assert.LessOrEqual(t, float64(nw.total())/entries, float64(4*depth))
		})
	}
}

func TestWithTreeBadInput(t *testing.T) {
	tests := []struct {
		name    string
		alg     Algorithm
		n       int
		parent  []int
		wantMsg string
	}{
		{"too few parents", Raymond, 3, []int{-1, 0}, "2 parents for n = 3"},
		{"no root", Raymond, 3, []int{1, 2, 0}, "no root"},
		{"two roots", Raymond, 3, []int{-1, 0, -1}, "two roots, peers 0 and 2"},
		{"own parent", Raymond, 3, []int{-1, 1, 0}, "parent of peer 1 is 1"},
		{"parent out of range", Raymond, 3, []int{-1, 0, 3}, "parent of peer 2 is 3"},
		{"negative parent", Raymond, 3, []int{-1, -2, 0}, "parent of peer 1 is -2"},
		{"cycle apart from the root", Raymond, 4, []int{-1, 0, 3, 2}, "peer 2 is on a cycle"},
		{"not raymond", SuzukiKasami, 2, []int{-1, 0}, "WithTree does not apply to suzuki-kasami"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.alg, tt.n, WithTree(tt.parent))
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tt.wantMsg)
			assert.Nil(t, c)
		})
	}
}

// TestWithTree runs Raymond over a star and a path rooted in the middle:
// safe under contention, and one entry at a time costs twice the distance
// in that tree.
func TestWithTree(t *testing.T) {
	const n = 6
	tests := []struct {
		name   string
		parent []int
		root   int
	}{
		{"star", []int{-1, 0, 0, 0, 0, 0}, 0},
		{"path rooted at 3", []int{1, 2, 3, -1, 3, 4}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			distance := func(a, b int) int { // up from both to the lowest common ancestor
				depth := func(i int) int {
					d := 0
					for ; tt.parent[i] >= 0; i = tt.parent[i] {
						d++
					}
					return d
				}
				d := 0
				for a != b {
					if depth(a) >= depth(b) {
						a = tt.parent[a]
					} else {
						b = tt.parent[b]
					}
					d++
				}
				return d
			}
			c, err := NewRaymond(n, WithTree(tt.parent))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			holder := tt.root
			for _, id := range []int{0, 5, 5, 1, 2, 4, tt.root} {
				before := c.Stats()
				lockWithin(t, c.Peer(id), 10*time.Second)
				c.Peer(id).Unlock()
				got := c.Stats().Sub(before)
				assert.Equal(t, uint64(2*distance(holder, id)), got.Messages, "peer %d after holder %d", id, holder)
				holder = id
			}
			c2, err := NewRaymond(n, WithTree(tt.parent))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c2.Close()) })
			hammer(t, c2, 2, 20, 30*time.Second)
		})
	}
}

// TestWithTreeCopies checks that changing the caller's slice after
// WithTree cannot change the tree the cluster uses.
func TestWithTreeCopies(t *testing.T) {
	parent := []int{-1, 0, 0}
	cfg, err := newConfig(Raymond, 3, forCluster, []Option{WithTree(parent)})
	require.NoError(t, err)
	parent[2] = 1
	assert.Equal(t, []int{-1, 0, 0}, cfg.treeParent)
}

// TestRaymondStateTellsHolder checks that the encoding tells apart two
// peers that differ only in where the privilege is (one enters on its next
// request, the other has to ask), whether they are inside, or have asked.
func TestRaymondStateTellsHolder(t *testing.T) {
	away, here := newRaymondMachine(t, 1, 3), newRaymondMachine(t, 1, 3)
	here.holder = 1
	assert.NotEqual(t, away.appendState(nil), here.appendState(nil))
	other := newRaymondMachine(t, 1, 3)
	other.holder = 2 // not a tree edge of the heap, but another direction all the same
	assert.NotEqual(t, away.appendState(nil), other.appendState(nil))

	// Inside or not, asked or not: each decides what the next message does.
	inside := newRaymondMachine(t, 1, 3)
	inside.holder, inside.using = 1, true
	assert.NotEqual(t, here.appendState(nil), inside.appendState(nil), "using")
	asked := newRaymondMachine(t, 1, 3)
	asked.asked = true
	assert.NotEqual(t, away.appendState(nil), asked.appendState(nil), "asked")
	// And whether a try passes here, and from whom: its answer goes back there.
	passing := newRaymondMachine(t, 1, 3)
	passing.tryFrom = 0
	assert.NotEqual(t, away.appendState(nil), passing.appendState(nil), "tryFrom")
}

// TestRaymondIgnoresStrayBusy checks that a busy while no try passes
// here changes nothing and sends nothing: only a try this node forwarded
// has an answer to pass back.
func TestRaymondIgnoresStrayBusy(t *testing.T) {
	r := newRaymondMachine(t, 1, 3)
	var out output
	r.step(event{kind: evMessage, msg: Message{Kind: KindBusy, From: 0, To: 1}}, &out)
	assert.Empty(t, out.msgs)
	assert.False(t, out.refused)
	assert.Equal(t, -1, r.tryFrom)
}

// TestRaymondIdleViolation pins what a node at rest must not keep: a use
// of the privilege, a request asked or queued, or a try passing through.
func TestRaymondIdleViolation(t *testing.T) {
	var out output
	r := newRaymondMachine(t, 1, 3)
	assert.Empty(t, r.idleViolation())
	r.step(event{kind: evRequest}, &out)
	assert.Equal(t, "keeps using false, asked true, queue [1]", r.idleViolation(), "waiting")

	root := newRaymondMachine(t, 0, 3)
	root.step(event{kind: evRequest}, &out)
	assert.Equal(t, "keeps using true, asked false, queue []", root.idleViolation(), "inside")
	root.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 2}}, &out)
	assert.Equal(t, "keeps using true, asked false, queue [2]", root.idleViolation(), "inside, a request queued")

	r = newRaymondMachine(t, 1, 3)
	out = output{}
	r.step(event{kind: evTry}, &out)
	require.Len(t, out.msgs, 1)
	assert.Equal(t, "keeps a try from P1", r.idleViolation(), "trying")

	// A request from child 3 waits behind the try, not asked yet.
	r = newRaymondMachine(t, 1, 4)
	r.step(event{kind: evTry}, &out)
	r.step(event{kind: evMessage, msg: Message{Kind: KindRequest, From: 3}}, &out)
	assert.Equal(t, "keeps using false, asked false, queue [3]", r.idleViolation(), "a request behind a try")

	// Peer 0's try passing down through peer 1, towards the privilege at 3.
	r = newRaymondMachine(t, 1, 4)
	r.holder = 3
	out = output{}
	r.step(event{kind: evMessage, msg: Message{Kind: KindTry, From: 0, To: 1}}, &out)
	require.Equal(t, []Message{{Kind: KindTry, From: 1, To: 3}}, out.msgs)
	assert.Equal(t, "keeps a try from P0", r.idleViolation(), "a try from peer 0 passing")
}
