package dmutex

import "slices"

// A fate says whether a surviving peer that waits after a fault is
// served: on every fair run from every such state (fateAlways), on
// some run from some such state (fateSometimes), or on none
// (fateNever). fateNone: the peer never waits there (it crashed).
type fate uint8

const (
	fateNone fate = iota
	fateAlways
	fateSometimes
	fateNever
)

func (o fate) String() string {
	switch o {
	case fateAlways:
		return "always"
	case fateSometimes:
		return "sometimes"
	case fateNever:
		return "never"
	}
	return "—"
}

// afterFault decides, over the explored graph, what happens to each peer
// in the states that in reports (the states after the fault; they must be
// closed under successors). For peer p and a set of states where p waits,
// p is served always when from none of them a run can avoid p's entry for
// ever, by reaching a quiet state or by staying in a fair cycle (see
// Check) without an entry of p; never when from none of them an entry of
// p can be reached; sometimes otherwise. fresh takes the states in which
// p has just asked, after the fault; all takes every state where p waits.
func (c *checker) afterFault(in func(s int32) bool) (fresh, all []fate) {
	ns := int32(len(c.info))
	// Predecessors inside the region, in one array.
	roff := make([]int32, ns+1)
	for s := range ns {
		if !in(s) {
			continue
		}
		for e := c.off[s]; e < c.off[s+1]; e++ {
			roff[c.to[e]+1]++
		}
	}
	for s := range ns {
		roff[s+1] += roff[s]
	}
	rfrom := make([]int32, roff[ns])
	redge := make([]int32, roff[ns])
	fill := make([]int32, ns)
	for s := range ns {
		if !in(s) {
			continue
		}
		for e := c.off[s]; e < c.off[s+1]; e++ {
			t := c.to[e]
			k := roff[t] + fill[t]
			fill[t]++
			rfrom[k], redge[k] = s, e
		}
	}
	// back marks every state of the region from which a marked state
	// is reachable, over the edges that keep accepts.
	back := func(mark []bool, keep func(e int32) bool) {
		var stack []int32
		for s := range ns {
			if mark[s] {
				stack = append(stack, s)
			}
		}
		for len(stack) > 0 {
			t := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for k := roff[t]; k < roff[t+1]; k++ {
				if s := rfrom[k]; !mark[s] && keep(redge[k]) {
					mark[s] = true
					stack = append(stack, s)
				}
			}
		}
	}
	fresh, all = make([]fate, c.cc.N), make([]fate, c.cc.N)
	for p := range c.cc.N {
		bit := uint32(1) << uint(p)
		// canEnter: an entry of p is reachable.
		canEnter := make([]bool, ns)
		for s := range ns {
			if !in(s) {
				continue
			}
			for e := c.off[s]; e < c.off[s+1]; e++ {
				if int(c.edgeEntry(e)) == p {
					canEnter[s] = true
				}
			}
		}
		back(canEnter, func(int32) bool { return true })
		// canAvoid: without p's entries, a quiet state or a fair cycle
		// is reachable.
		noEntry := func(e int32) bool { return int(c.edgeEntry(e)) != p }
		canAvoid := make([]bool, ns)
		for s := range ns {
			if in(s) && c.info[s].flags&stQuiet != 0 {
				canAvoid[s] = true
			}
		}
		for _, comp := range c.fairComponents(in, noEntry) {
			for _, s := range comp {
				canAvoid[s] = true
			}
		}
		back(canAvoid, noEntry)
		verdict := func(waits, always, some bool) fate {
			switch {
			case !waits:
				return fateNone
			case always:
				return fateAlways
			case some:
				return fateSometimes
			}
			return fateNever
		}
		// Every state where p waits, and every request served at once.
		waits, always, some := false, true, false
		for s := range ns {
			if !in(s) {
				continue
			}
			if c.info[s].waitAny&bit != 0 {
				waits = true
				always = always && !canAvoid[s]
				some = some || canEnter[s]
				continue
			}
			for e := c.off[s]; e < c.off[s+1]; e++ {
				if int(c.edgeEntry(e)) == p && c.edgeClass(e) < 0 { // asked and entered in one step
					waits, some = true, true
				}
			}
		}
		all[p] = verdict(waits, always, some)
		// The requests made after the fault: the steps in which p starts
		// to wait, or asks and enters at once.
		waits, always, some = false, true, false
		for s := range ns {
			if !in(s) || c.info[s].waitAny&bit != 0 {
				continue
			}
			for e := c.off[s]; e < c.off[s+1]; e++ {
				t := c.to[e]
				switch {
				case c.info[t].waitAny&bit != 0:
					waits = true
					always = always && !canAvoid[t]
					some = some || canEnter[t]
				case int(c.edgeEntry(e)) == p && c.edgeClass(e) < 0: // asked and entered in one step
					waits, some = true, true
				}
			}
		}
		fresh[p] = verdict(waits, always, some)
	}
	return fresh, all
}

// fairComponents returns the strongly connected components of the
// subgraph of the states in and the edges keep, that hold a cycle and in
// which every fairness class enabled in all their states (in the whole
// graph) is taken by an edge of the component: a fair run can stay in one
// for ever.
func (c *checker) fairComponents(in func(s int32) bool, keep func(e int32) bool) [][]int32 {
	sc := newSCCs(len(c.info))
	defer sc.release()
	var fair [][]int32
	target := func(e int32) int32 {
		if !keep(e) {
			return -1
		}
		return c.to[e]
	}
	sc.components(int32(len(c.info)), in, c.edges, target, func(id int32) bool {
		if c.fairComponent(sc.members, sc.comp, id, keep) {
			fair = append(fair, slices.Clone(sc.members))
		}
		return true
	})
	return fair
}

// fairComponent reports whether component id (its members) holds a cycle
// over the edges keep, and takes every fairness class enabled in all its
// states.
func (c *checker) fairComponent(members, comp []int32, id int32, keep func(e int32) bool) bool {
	return fairOver(members, func(u int32, yield func(cls int32, inside bool)) {
		for e := c.off[u]; e < c.off[u+1]; e++ {
			yield(c.edgeClass(e), keep(e) && comp[c.to[e]] == id)
		}
	})
}

// fairOver reports whether a component holds a cycle and takes every
// fairness class enabled in all its states: edges(u, yield) yields, for
// each edge of member u in the whole graph, its class (-1 for none) and
// whether it stays inside the component.
func fairOver(members []int32, edges func(u int32, yield func(cls int32, inside bool))) bool {
	taken := map[int32]bool{}
	cyclic := false
	var always map[int32]bool // classes enabled in every member so far
	for i, u := range members {
		here := map[int32]bool{}
		edges(u, func(k int32, inside bool) {
			if k >= 0 {
				here[k] = true
			}
			if inside {
				cyclic = true
				if k >= 0 {
					taken[k] = true
				}
			}
		})
		if i == 0 {
			always = here
			continue
		}
		for k := range always {
			if !here[k] {
				delete(always, k)
			}
		}
	}
	if !cyclic {
		return false
	}
	for k := range always {
		if !taken[k] {
			return false
		}
	}
	return true
}
