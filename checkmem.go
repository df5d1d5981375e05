package dmutex

import "reflect"

// DefaultMaxMemory is the memory after which Check stops when
// CheckConfig.MaxMemory is zero: 1.5 GiB, as the search counts it (see
// CheckConfig.MaxMemory).
const DefaultMaxMemory = 3 << 29

// memory returns the bytes the search holds as it counts them: the
// table of hashes (twice more when it is about to double), the graph (with what liveness and, depth first,
// renumber will add), and the worlds waiting to be explored (on the
// depth-first path, or in the breadth-first frontier) at the average size
// of the worlds it sampled.
func (c *checker) memory(worlds int) int64 {
	// The search asks at every transition, and the sum asks which arrays
	// are mapped (a lock each): ask again only when what it sums may
	// have changed, that is when a state, an edge, a class or a waiting
	// world came or went. (What the search on the fly adds changes only
	// with them: its pending arrays' peak grows with a new state, and its
	// scratch as a component completes, when the path shortens.)
	key := memoryKey{c.res.States, worlds, len(c.to), len(c.parent), c.classBytes}
	if key == c.memKey && c.memBytes > 0 {
		return c.memBytes
	}
	c.memKey, c.memBytes = key, c.countMemory(worlds)
	return c.memBytes
}

// afterSearch is the most that renumber and liveness add, after a
// depth-first search with the graph of s states whose edge targets and
// states' info hold to and info bytes, with liveness's scratch for each
// of passes peers at once: renumber's three numbers a state (the new
// numbers, their order, the parents) and a copy of its biggest array
// beside the original, or liveness's per-state scratch (20 bytes a pass)
// beside the parents renumber kept.
func afterSearch(s, to, info int64, passes int) int64 {
	return max(s*12+max(to, info), s*(20*int64(passes)+4))
}

// memoryKey is what memory's sum depends on, beside the state's own
// size: the states, the worlds waiting, the edges, the parents (the
// breadth-first searches') and the classes.
type memoryKey struct {
	states, worlds, edges, parents int
	classBytes                     int64
}

// countMemory is memory's sum.
func (c *checker) countMemory(worlds int) int64 {
	b := c.fps.bytes() + c.fps.growBytes(1024)
	b += arrayBytes(c.parent) + arrayBytes(c.off) + arrayBytes(c.to) + arrayBytes(c.cls) + arrayBytes(c.ent)
	b += arrayBytes(c.code) + arrayBytes(c.info)
	s := int64(c.res.States)
	switch {
	case c.deep:
		// The most of what renumber adds, three numbers a state (the new
		// numbers, their order, the parents) and a copy of its biggest
		// array beside the original, and of what liveness adds after it:
		// its per-state scratch (13 bytes, 4 a component, and its
		// stacks), 20 bytes, beside the parents renumber kept. renumber
		// returns all but the parents before liveness starts.
		b += afterSearch(s, arrayBytes(c.to), arrayBytes(c.info), 1)
		b += int64(cap(c.deadlocks))*4 + int64(cap(c.overlaps))*8
	case c.graph:
		b += s * 16 // what liveness will add: its per-state scratch
	case c.fly != nil:
		b += c.fly.bytes()
	}
	b += c.classBytes
	return b + int64(worlds)*c.worldSize
}

// sample folds w's size into the average size of a world. It weighs a
// fresh clone of w: what w holds beyond that (spare machines, arrays
// longer than their contents, both left by the worlds that the search
// reused to make w) depends on which worlds came before it on this
// goroutine, and so, with workers, on their timing; the clone's size
// depends only on the state. So a memory limit stops the search at the
// same state for any number of workers. The breadth-first searches drop
// a waiting world's spare machines (dropSpare), which it would otherwise
// hold beyond the clone's size.
func (c *checker) sample(w *World) {
	s := deepSize(reflect.ValueOf(w.Clone()), map[uintptr]bool{})
	c.samples++
	c.worldSize += (s - c.worldSize) / c.samples
	if c.worldSize < s/2 {
		c.worldSize = s / 2 // a world much bigger than the average so far raises it at once
	}
}

// deepSize returns the bytes v refers to, each pointer's target counted
// once; shared copy-on-write parts are counted in each world, so the sum
// over worlds is an upper bound.
func deepSize(v reflect.Value, seen map[uintptr]bool) int64 {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() || seen[v.Pointer()] {
			return 0
		}
		seen[v.Pointer()] = true
		e := v.Elem()
		return int64(e.Type().Size()) + innerSize(e, seen)
	case reflect.Interface:
		if v.IsNil() {
			return 0
		}
		e := v.Elem()
		if e.Kind() == reflect.Pointer {
			return deepSize(e, seen)
		}
		return int64(e.Type().Size()) + innerSize(e, seen)
	case reflect.Slice:
		if v.IsNil() || seen[v.Pointer()] {
			return 0
		}
		seen[v.Pointer()] = true
		b := int64(v.Cap()) * int64(v.Type().Elem().Size())
		for i := range v.Len() {
			b += innerSize(v.Index(i), seen)
		}
		return b
	case reflect.Map:
		if v.IsNil() || seen[v.Pointer()] {
			return 0
		}
		seen[v.Pointer()] = true
		// Buckets hold keys and values with some slack, and a header.
		b := 48 + 2*int64(v.Len())*int64(v.Type().Key().Size()+v.Type().Elem().Size())
		it := v.MapRange()
		for it.Next() {
			b += innerSize(it.Key(), seen) + innerSize(it.Value(), seen)
		}
		return b
	case reflect.String:
		return int64(v.Len())
	}
	return innerSize(v, seen)
}

// innerSize returns what v, already counted in its container, refers to.
func innerSize(v reflect.Value, seen map[uintptr]bool) int64 {
	switch v.Kind() {
	case reflect.Struct:
		var b int64
		for i := range v.NumField() {
			b += innerSize(v.Field(i), seen)
		}
		return b
	case reflect.Array:
		var b int64
		for i := range v.Len() {
			b += innerSize(v.Index(i), seen)
		}
		return b
	case reflect.Pointer, reflect.Interface, reflect.Slice, reflect.Map, reflect.String:
		return deepSize(v, seen)
	}
	return 0
}

// dropSpare lets go of w's spare machines (see World.cloneInto) and
// returns w. A world waiting in a breadth-first frontier is only ever
// cloned from, never into, so it would hold them for nothing, and beyond
// the size sample measures.
func dropSpare(w *World) *World {
	w.spare = nil
	return w
}
