package dmutex

import (
	"reflect"
	"unsafe"
)

// DefaultMaxMemory is the memory after which Check stops when
// CheckConfig.MaxMemory is zero: 1.5 GiB, as the search counts it (see
// CheckConfig.MaxMemory).
const DefaultMaxMemory = 3 << 29

// memory returns the bytes the search holds as it counts them: the
// table of hashes, the graph (with what liveness and, depth first,
// renumber will add), and the worlds waiting to be explored (on the
// depth-first path, or in the breadth-first frontier) at the average size
// of the worlds it sampled.
func (c *checker) memory(worlds int) int64 {
	b := c.fps.bytes()
	b += int64(cap(c.parent)+cap(c.off)+cap(c.to)+cap(c.cls))*4 + int64(cap(c.ent))
	b += int64(cap(c.info)) * int64(unsafe.Sizeof(stateInfo{}))
	if c.graph {
		b += int64(c.res.States) * 16 // what liveness will add: its per-state scratch
	}
	if c.deep {
		// What renumber adds: two numbers a state, and a copy of its
		// biggest array beside the original.
		b += int64(c.res.States)*8 + max(int64(cap(c.to))*4, int64(cap(c.info))*int64(unsafe.Sizeof(stateInfo{})))
		b += int64(cap(c.deadlocks))*4 + int64(cap(c.overlaps))*8
	}
	b += c.classBytes
	return b + int64(worlds)*c.worldSize
}

// sample folds w's size into the average size of a world.
func (c *checker) sample(w *World) {
	s := deepSize(reflect.ValueOf(w), map[uintptr]bool{})
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
