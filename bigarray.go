package dmutex

import (
	"sync"
	"unsafe"
)

// Big arrays outside the Go heap.
//
// The graph search keeps a few arrays of plain numbers (no pointers) that
// grow to gigabytes: the edges, the states' offsets and what holds in
// them, the table of hashes. Grown in the Go heap they cost up to three
// times their size: append copies an array into one 25% bigger, the old
// one stays until a collection, and the collector lets the heap grow to
// twice what it last found live before it collects again. So past
// bigArrayMin elements an array is moved to memory mapped from the
// operating system (mapArray), reserved at once for the most elements it
// can ever hold and never moved again: the kernel gives it pages only as
// they are first written, so it costs what it holds, rounded up to a
// page, and append never copies it. Such an array is returned to the
// system at once by unmapArray when the search no longer needs it, not
// whenever the collector runs. Where the system cannot map memory (see
// bigarray_other.go, or when the reservation is refused), the arrays stay
// in the heap, as before: the results are the same, only the memory
// differs.
//
// Nothing is read differently: a mapped array is an ordinary Go slice of
// the same type, whose elements are zero when first read, as make's are.

// bigArrayMin is the length past which grow moves an array out of the
// heap: 1 Mi elements (4 MB of int32), above what tests of small
// configurations reach (a variable, so that a test can move small ones).
var bigArrayMin = 1 << 20

// mapped records, by base address, every mapping
// mapArray made and unmapArray has not undone, so that unmapArray never
// touches memory it did not map (a slice that append moved to the heap,
// or one never mapped).
var mapped = struct {
	sync.Mutex
	regions map[uintptr][]byte
}{regions: map[uintptr][]byte{}}

// grow returns s with room for extra more elements. Small arrays grow as
// append grows them; once len(s)+extra passes bigArrayMin, s is copied
// once into a mapping of capacity reserve (at least that many elements)
// and stays there. reserve is the most elements the array can hold in
// this search, so that a mapped array is never copied again.
func grow[T any](s []T, extra, reserve int) []T {
	need := len(s) + extra
	if need <= cap(s) {
		return s
	}
	if need > bigArrayMin && reserve >= need {
		if m, ok := mapArray[T](reserve); ok {
			m = append(m, s...)
			unmapArray(s)
			return m
		}
	}
	return append(s, make([]T, extra)...)[:len(s)]
}

// mapArray returns an empty slice of capacity n in mapped memory (see
// the top of this file), or false if the system refused it. T must hold
// no pointers.
func mapArray[T any](n int) ([]T, bool) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if n <= 0 || size == 0 {
		return nil, false
	}
	b, ok := mapBytes(n * size)
	if !ok {
		return nil, false
	}
	mapped.Lock()
	mapped.regions[uintptr(unsafe.Pointer(&b[0]))] = b
	mapped.Unlock()
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)[:0], true
}

// unmapArray returns s's memory to the system if mapArray mapped it, and
// does nothing otherwise. s must not be used afterwards.
func unmapArray[T any](s []T) {
	if cap(s) == 0 {
		return
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	mapped.Lock()
	b, ok := mapped.regions[base]
	delete(mapped.regions, base)
	mapped.Unlock()
	if ok {
		unmapBytes(b)
	}
}

// isMapped reports whether s lives in a mapping of mapArray's.
func isMapped[T any](s []T) bool {
	if cap(s) == 0 {
		return false
	}
	mapped.Lock()
	defer mapped.Unlock()
	_, ok := mapped.regions[uintptr(unsafe.Pointer(unsafe.SliceData(s)))]
	return ok
}

// arrayBytes returns the memory s holds: its capacity in the heap, and
// in a mapping only the elements in use (the kernel gives pages as they
// are written).
func arrayBytes[T any](s []T) int64 {
	var zero T
	n := cap(s)
	if isMapped(s) {
		n = len(s)
	}
	return int64(n) * int64(unsafe.Sizeof(zero))
}
