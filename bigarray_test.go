//go:build linux

package dmutex

import (
	"fmt"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Only Linux maps the big arrays (bigarray_linux.go); elsewhere they stay
// in the heap and there is nothing here to test.

// withBigArrayMin sets bigArrayMin to n for the test.
func withBigArrayMin(t *testing.T, n int) {
	old := bigArrayMin
	bigArrayMin = n
	t.Cleanup(func() { bigArrayMin = old })
}

// systemMaps reports whether the system maps the page at p in this
// process: mincore fails (ENOMEM) on a page that is not mapped.
func systemMaps(p unsafe.Pointer) bool {
	page := uintptr(os.Getpagesize())
	var vec [1]byte
	_, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(p)&^(page-1), page, uintptr(unsafe.Pointer(&vec[0])))
	return errno == 0
}

// counting returns 1, 2, ..., n.
func counting(n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(i + 1)
	}
	return s
}

// TestGrow pins when grow moves an array, and where: not at all while it
// has room (even exactly the room asked), in the heap or mapped, by append in the heap up to
// bigArrayMin elements (the limit itself included), once into a mapping
// of exactly reserve elements past it when reserve holds what is asked
// (reserve equal to it included), in the heap when it does not or the
// system refuses the mapping; the elements always move with it, and a
// mapped array that moves again is returned to the system.
func TestGrow(t *testing.T) {
	withBigArrayMin(t, 64)
	same := func(a, b []int32) bool { return unsafe.SliceData(a) == unsafe.SliceData(b) }

	s := make([]int32, 2, 10)
	g := grow(s, 7, 1000)
	assert.True(t, same(s, g), "room left: the array stays")
	g = grow(s, 8, 1000)
	assert.True(t, same(s, g), "exactly the room asked: the array stays")
	assert.Equal(t, 2, len(g))
	assert.Equal(t, 10, cap(g))

	s = counting(3)
	g = grow(s, 5, 1000)
	assert.Equal(t, s, g)
	assert.GreaterOrEqual(t, cap(g), 8)
	assert.False(t, isMapped(g), "small arrays stay in the heap")

	s = counting(60)
	g = grow(s, 4, 1000)
	assert.Equal(t, s, g)
	assert.GreaterOrEqual(t, cap(g), 64)
	assert.False(t, isMapped(g), "bigArrayMin elements stay in the heap")

	g = grow(s, 5, 65)
	require.True(t, isMapped(g), "past bigArrayMin, with reserve the need, the array is mapped")
	assert.Equal(t, s, g)
	assert.Equal(t, 65, cap(g), "mapped for reserve elements")
	assert.Equal(t, make([]int32, 5), g[60:65], "the rest reads zero")

	h := grow(s, 5, 64)
	assert.False(t, isMapped(h), "a reserve below the need: the heap")
	assert.Equal(t, s, h)
	assert.GreaterOrEqual(t, cap(h), 65)

	// A mapped array with the room asked stays where it is (append would
	// not move it either), ...
	require.True(t, same(g, grow(g, 5, 200)), "a mapped array with exactly the room asked stays") // else g is unmapped
	assert.True(t, same(g, grow(g, 2, 200)), "a mapped array with room stays")
	// ... and one grown past its reservation moves to a new one, and the
	// old is returned to the system.
	g = g[:65]
	for i := range g {
		g[i] = int32(i + 1)
	}
	old := unsafe.Pointer(unsafe.SliceData(g))
	h = grow(g, 10, 200)
	require.True(t, isMapped(h))
	assert.Equal(t, counting(65), h)
	assert.Equal(t, 200, cap(h))
	assert.False(t, isMapped(g), "the old mapping is forgotten")
	assert.False(t, systemMaps(old), "the old mapping is returned to the system")
	unmapArray(h)

	// The system refuses a reservation of 4 EiB: the heap, as below
	// bigArrayMin.
	b := []byte("abc")
	gb := grow(b, 100, 1<<62)
	assert.False(t, isMapped(gb))
	assert.Equal(t, b, gb)
	assert.GreaterOrEqual(t, cap(gb), 103)
}

// TestMapArray pins mapArray: an empty slice of capacity n, recorded as
// mapped, zero throughout and writable; nothing for no elements or
// elements of no size, nor when the system refuses (4 EiB, which no
// address space holds).
func TestMapArray(t *testing.T) {
	for _, n := range []int{0, -1} {
		m, ok := mapArray[int32](n)
		assert.False(t, ok, "n = %d", n)
		assert.Nil(t, m)
	}
	_, ok := mapArray[struct{}](10)
	assert.False(t, ok, "elements of no size")
	_, ok = mapArray[byte](1 << 62)
	assert.False(t, ok, "a reservation the system refuses")

	m, ok := mapArray[int64](1000)
	require.True(t, ok)
	assert.Equal(t, 0, len(m))
	assert.Equal(t, 1000, cap(m))
	assert.True(t, isMapped(m))
	m = m[:1000]
	assert.Equal(t, make([]int64, 1000), m)
	m[999] = 7
	assert.Equal(t, int64(7), m[999])
	assert.True(t, systemMaps(unsafe.Pointer(&m[0])))
	unmapArray(m)
}

// TestUnmapArray pins unmapArray: a mapped array is forgotten and
// returned to the system; an array in the heap, or a mapped one's empty
// slice of capacity 0 (whose data pointer is still the mapping's base),
// is left alone.
func TestUnmapArray(t *testing.T) {
	unmapArray([]int32(nil))
	heap := counting(5)
	unmapArray(heap)
	assert.Equal(t, counting(5), heap)

	m, ok := mapArray[int32](2048)
	require.True(t, ok)
	m = m[:2048]
	base := unsafe.Pointer(&m[0])
	require.Equal(t, base, unsafe.Pointer(unsafe.SliceData(m[:0:0])), "the empty slice still points at the base")
	unmapArray(m[:0:0])
	assert.True(t, isMapped(m), "an empty slice of capacity 0 unmaps nothing")
	assert.True(t, systemMaps(base))
	m[2047] = 1 // still writable

	unmapArray(m)
	assert.False(t, isMapped(m), "forgotten")
	assert.False(t, systemMaps(base), "returned to the system")
	unmapArray(m) // again: nothing left to do
}

// TestIsMapped pins isMapped: true for a slice of a mapping of mapArray's
// from its base, false for nil, an array in the heap and a mapped one's
// empty slice of capacity 0.
func TestIsMapped(t *testing.T) {
	assert.False(t, isMapped([]int32(nil)))
	assert.False(t, isMapped(counting(3)))
	m, ok := mapArray[int32](100)
	require.True(t, ok)
	defer unmapArray(m)
	assert.True(t, isMapped(m))
	assert.True(t, isMapped(m[:50]))
	assert.False(t, isMapped(m[:0:0]))
}

// TestArrayBytes pins what the memory limit counts for an array: its
// capacity in the heap, only the elements in use in a mapping (the kernel
// gives pages as they are written).
func TestArrayBytes(t *testing.T) {
	assert.Equal(t, int64(0), arrayBytes([]int32(nil)))
	assert.Equal(t, int64(40), arrayBytes(make([]int32, 3, 10)))
	m, ok := mapArray[int32](1000)
	require.True(t, ok)
	defer unmapArray(m)
	assert.Equal(t, int64(0), arrayBytes(m))
	assert.Equal(t, int64(12), arrayBytes(m[:3]))
}

// TestDepthFirstGraphEdgesFitInt32 pins the depth-first search's last
// stop: its edges are numbered in int32, so it stops, as at the memory
// limit, before a state whose edges would pass math.MaxInt32, and not
// before. A graph that big is faked: the edges and their bytes are
// mapped for the most an int32 numbers and given a length that leaves
// exactly the start's edges; only their last pages are ever written.
// The search takes one step, and stops at the state it found. The
// address space is limited meanwhile, so that a search that went on
// fails to copy the 8 GiB of edges into the heap rather than doing it.
func TestDepthFirstGraphEdgesFitInt32(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow of 10 GiB of mappings")
	}
	c, w := deepStart(t, CheckConfig{Algorithm: RicartAgrawala, N: 2, Requests: 1, MaxMemory: -1})
	k := len(w.appendTransitions(nil, true))
	require.Positive(t, k)
	to, ok := mapArray[int32](math.MaxInt32)
	require.True(t, ok)
	code, ok := mapArray[uint8](math.MaxInt32)
	require.True(t, ok)
	c.to, c.code = to[:math.MaxInt32-k], code[:math.MaxInt32-k]

	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_AS, &lim))
	status, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	var vm uint64
	for _, line := range strings.Split(string(status), "\n") {
		if _, err := fmt.Sscanf(line, "VmSize: %d kB", &vm); err == nil {
			break
		}
	}
	require.Positive(t, vm)
	if lim.Max != ^uint64(0) && lim.Max < vm<<10+2<<30 {
		t.Skip("the address space is limited already")
	}
	t.Cleanup(c.release) // 10 GiB of mappings, returned once the test is done
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: vm<<10 + 2<<30, Max: lim.Max}))
	complete, err := func() (bool, error) {
		defer func() { require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_AS, &lim)) }() // also if the search panics
		return c.depthFirstGraph(w)
	}()
	require.NoError(t, err)
	assert.False(t, complete)
	assert.Equal(t, StoppedAtMemoryLimit, c.stopped)
	assert.Equal(t, 2, c.res.States, "the start's edges fit")
	assert.Equal(t, 1, c.res.Transitions)
	assert.Equal(t, math.MaxInt32, len(c.to), "the start's edges, and not the next state's") // not Len, which would print 2 Gi edges
}

// TestMakeArray pins makeArray: n zero elements, in the heap up to
// bigArrayMin and mapped past it.
func TestMakeArray(t *testing.T) {
	withBigArrayMin(t, 64)
	a := makeArray[int32](64)
	assert.False(t, isMapped(a))
	assert.Equal(t, make([]int32, 64), a)
	a = makeArray[int32](65)
	require.True(t, isMapped(a))
	assert.Equal(t, make([]int32, 65), a)
	assert.Equal(t, 65, cap(a))
	unmapArray(a)
}
