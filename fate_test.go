package dmutex

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFairComponents: fairComponents on a graph made by hand. A and B
// (states 0 and 1) go round A -> B (class 1) -> A (class 0); A also has
// an edge of class 0 out to X (state 2). Class 0 is enabled in both and
// taken inside: the component is fair. It is not when the edge back is
// left out (keep), nor when B's edge back has another class while B
// still offers class 0 out to X: then class 0 is enabled in both and
// taken by no edge inside. afterFault asks it with the edges that do not
// let a peer in.
func TestFairComponents(t *testing.T) {
	graph := func(off, to []int32, code []uint8) *checker {
		return &checker{compact: true, kinds: []edgeKind{{cls: 0, ent: -1}, {cls: 1, ent: -1}, {cls: 2, ent: -1}},
			off: off, to: to, code: code, info: make([]stateInfo, 3)}
	}
	in := func(s int32) bool { return s < 2 }
	c := graph([]int32{0, 2, 3, 3}, []int32{1, 2, 0}, []uint8{1, 0, 0})
	assert.Equal(t, [][]int32{{1, 0}}, c.fairComponents(in, everyEdge))
	assert.Empty(t, c.fairComponents(in, func(e int32) bool { return e != 2 }), "no edge back")
	c = graph([]int32{0, 2, 4, 4}, []int32{1, 2, 0, 2}, []uint8{1, 0, 2, 0})
	assert.Empty(t, c.fairComponents(in, everyEdge), "class 0 enabled in both, taken by none inside")
	// Edges left out by keep neither join states nor take classes: A ->
	// B (class 0) and B -> A (class 1, left out) are two components, not
	// one fair one; and with A -> B and B -> A both of class 0, a second
	// edge B -> A of class 1 left out does not take class 1, which A's
	// edge out to X and that edge enable in both.
	c = graph([]int32{0, 1, 2, 2}, []int32{1, 0}, []uint8{0, 1})
	assert.Empty(t, c.fairComponents(in, func(e int32) bool { return e != 1 }), "joined by an edge left out")
	c = graph([]int32{0, 2, 4, 4}, []int32{1, 2, 0, 0}, []uint8{0, 1, 0, 1})
	assert.Empty(t, c.fairComponents(in, func(e int32) bool { return e != 3 }), "a class taken by an edge left out")
	assert.Equal(t, [][]int32{{1, 0}}, c.fairComponents(in, everyEdge))
}
