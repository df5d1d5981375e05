package dmutex

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
	ns := int32(len(c.info))
	index := make([]int32, ns)
	low := make([]int32, ns)
	comp := make([]int32, ns)
	onStack := make([]bool, ns)
	for i := range index {
		index[i], comp[i] = -1, -1
	}
	var stack []int32
	var calls []sccFrame
	var fair [][]int32
	next, ncomp := int32(0), int32(0)
	for root := range ns {
		if !in(root) || index[root] >= 0 {
			continue
		}
		calls = append(calls[:0], sccFrame{v: root, e: c.off[root]})
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(calls) > 0 {
			f := &calls[len(calls)-1]
			v := f.v
			if f.e < c.off[v+1] {
				e := f.e
				f.e++
				u := c.to[e]
				if !in(u) || !keep(e) {
					continue
				}
				if index[u] < 0 {
					index[u], low[u] = next, next
					next++
					stack = append(stack, u)
					onStack[u] = true
					calls = append(calls, sccFrame{v: u, e: c.off[u]})
				} else if onStack[u] {
					low[v] = min(low[v], index[u])
				}
				continue
			}
			calls = calls[:len(calls)-1]
			if len(calls) > 0 {
				w := calls[len(calls)-1].v
				low[w] = min(low[w], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			var members []int32
			for {
				u := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[u] = false
				comp[u] = ncomp
				members = append(members, u)
				if u == v {
					break
				}
			}
			if c.fairComponent(members, comp, ncomp, keep) {
				fair = append(fair, members)
			}
			ncomp++
		}
	}
	return fair
}

// fairComponent reports whether component id (its members) holds a cycle
// over the edges keep, and takes every fairness class enabled in all its
// states.
func (c *checker) fairComponent(members, comp []int32, id int32, keep func(e int32) bool) bool {
	taken := map[int32]bool{}
	cyclic := false
	var always map[int32]bool // classes enabled in every member so far
	for i, u := range members {
		here := map[int32]bool{}
		for e := c.off[u]; e < c.off[u+1]; e++ {
			if k := c.edgeClass(e); k >= 0 {
				here[k] = true
			}
			if keep(e) && comp[c.to[e]] == id {
				cyclic = true
				if k := c.edgeClass(e); k >= 0 {
					taken[k] = true
				}
			}
		}
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
