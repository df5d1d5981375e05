package main

import (
	"go/parser"
	"go/token"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const tiny = `package p

func f(a, b int, ok bool, out *output) int {
	if a < b && ok {
		out.send(a)
	}
	a++
	b = a + 1
	log(b)
	return b
}

func String() string { return "x" }

func g(a int) bool { return a != 0 }
`

func all() map[string]bool {
	k := map[string]bool{}
	for _, a := range allKinds {
		k[a] = true
	}
	return k
}

func TestGenerateTiny(t *testing.T) {
	ms, err := generate("tiny.go", []byte(tiny), all(), regexp.MustCompile(`^String$`))
	require.NoError(t, err)
	var got []string
	for _, m := range ms {
		got = append(got, m.String())
		// Every mutant must still parse, and differ from the original.
		out := m.apply([]byte(tiny))
		assert.NotEqual(t, tiny, string(out), m.String())
		_, err := parser.ParseFile(token.NewFileSet(), "m.go", out, 0)
		assert.NoError(t, err, "%s:\n%s", m, out)
	}
	assert.Equal(t, []string{
		`tiny.go:4:5 cond "a < b && ok" -> "true"`,
		`tiny.go:4:5 cond "a < b && ok" -> "false"`,
		`tiny.go:4:5 cond "a < b" -> "true"`,
		`tiny.go:4:7 cmp "<" -> "<="`,
		`tiny.go:4:7 cmp "<" -> ">="`,
		`tiny.go:4:11 logic "&&" -> "||"`,
		`tiny.go:4:14 cond "ok" -> "true"`,
		`tiny.go:5:3 drop-send "out.send(a)" -> (nothing)`,
		`tiny.go:7:2 drop-incdec "a++" -> (nothing)`,
		`tiny.go:8:2 drop-assign "b = a + 1" -> (nothing)`,
		`tiny.go:8:6 off1 "a + 1" -> "(a)"`,
		`tiny.go:8:10 off1 "1" -> "2"`,
		`tiny.go:9:2 drop-call "log(b)" -> (nothing)`,
		`tiny.go:15:31 cmp "!=" -> "=="`,
	}, got)

	// The same source gives the same mutants, and kinds filter them.
	again, err := generate("tiny.go", []byte(tiny), map[string]bool{kindCmp: true}, nil)
	require.NoError(t, err)
	require.Len(t, again, 3)
	assert.Contains(t, string(again[0].apply([]byte(tiny))), "if a <= b && ok {")
}

func TestSelectOnly(t *testing.T) {
	ms, err := generate("tiny.go", []byte(tiny), all(), nil)
	require.NoError(t, err)
	assert.Len(t, selectOnly(ms, []string{"tiny.go:8"}), 3)
	assert.Len(t, selectOnly(ms, []string{"tiny.go:4:7"}), 2)
	assert.Empty(t, selectOnly(ms, []string{"other.go:4"}))
}
