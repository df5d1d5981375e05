package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// schemaSrc has one mutant of every kind, nested ones, and the cases that
// must be built alone.
const schemaSrc = `package p

import "strings"

type output struct{ n int }

func (o *output) send(a int) { o.n += a }

func log(int) {}

func f(a, b int, ok bool, out *output) int {
	if a < b && ok {
		out.send(a)
	}
	a++
	b = a + 1
	log(b)
	if v, ok := lookup(a); ok {
		b = v
	}
	if a == b || b-1 > 2 {
		return 1
	}
	s := "x"
	log(len(s))
	s = strings.ToUpper(s)
	const k = 3
	if k+1 > 2 {
		panic("k")
	}
	return b
}

func lookup(a int) (int, bool) { return a, a > 0 }

func g(x any) {
	switch v := x.(type) {
	case int:
		log(v)
	}
}
`

func typeCheck(t *testing.T, srcs map[string][]byte) (*token.FileSet, []*ast.File, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	for name, src := range srcs {
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		require.NoError(t, err, "%s:\n%s", name, src)
		files = append(files, f)
	}
	_, err := (&types.Config{Importer: importer.Default()}).Check("p", fset, files, nil)
	return fset, files, err
}

func TestSchemaCompiles(t *testing.T) {
	src := []byte(schemaSrc)
	ms, err := generate("s.go", src, all(), nil)
	require.NoError(t, err)
	in := make([]bool, len(ms))
	for i := range in {
		in[i] = true
	}
	sc, err := buildSchema(src, ms, in)
	require.NoError(t, err)
	_, _, err = typeCheck(t, map[string][]byte{"s.go": sc.src, helperName: helperFile("p")})
	require.NoError(t, err, "%s", sc.src)

	got := string(sc.src)
	for _, want := range []string{
		// The if condition's true and false, around the && form.
		"if (zzMutateID == 2 || zzMutateID != 3 && ((((((zzMutateID == 4 || (zzMutateOrd(a, b, 0, 5, 1, 6, 3)))) != (zzMutateID == 7)) &&",
		// The drop of a send.
		`if zzMutateID != 9 { out.send(a) }`,
		// x + 1 to x and to x + 2, in one call.
		`b = zzMutateAdd(a, `,
		// == to != as a negation.
		`((a == b) != (zzMutateID == `,
		// The operand of a comparison in its own form.
		`zzMutateOrd(zzMutateSub(b, 24, 25), 2, 2, 26, 3, 27, 1)`,
	} {
		assert.Contains(t, got, want)
	}
	// Every mutant is somewhere in the schema.
	for i := range ms {
		assert.Contains(t, got, "zzMutateID", "mutant %d", id(i))
	}

	// A compiler error inside a wrap points at that wrap's mutants.
	at := strings.Index(got, "zzMutateAdd(a, ")
	require.Positive(t, at)
	c := sc.culprits(at)
	require.Len(t, c, 2)
	assert.Equal(t, kindOffByOne, ms[c[0]].kind)
	assert.Nil(t, sc.culprits(0), "the package clause is no mutant's")
	line := strings.Count(got[:at], "\n") + 1
	col := at - strings.LastIndex(got[:at], "\n")
	assert.Equal(t, at, offset(sc.src, line, col))
}

func TestSchemaAlone(t *testing.T) {
	src := []byte(schemaSrc)
	fset, files, err := typeCheck(t, map[string][]byte{"s.go": src})
	require.NoError(t, err)
	tp, err := checkTyped(fset, "p", files, files[0], importer.Default())
	require.NoError(t, err)
	ms, err := generate("s.go", src, all(), nil)
	require.NoError(t, err)
	alone := map[string]string{}
	for _, m := range ms {
		if why := tp.alone(m); why != "" {
			alone[m.String()] = why
		}
	}
	assert.Equal(t, map[string]string{
		// ok of the if's init is used only by the condition.
		`s.go:18:25 cond "ok" -> "true"`:  "removes the last use of ok",
		`s.go:18:25 cond "ok" -> "false"`: "removes the last use of ok",
		// v is only read by the assignment.
		`s.go:19:3 drop-assign "b = v" -> (nothing)`: "removes the last use of v",
		// The only use of the import.
		`s.go:26:2 drop-assign "s = strings.ToUpper(s)" -> (nothing)`: "removes the last use of strings",
		// Constant expressions are the compiler's to check.
		`s.go:28:9 cmp ">" -> ">="`:                       "constant expression",
		`s.go:28:9 cmp ">" -> "<="`:                       "constant expression",
		`s.go:28:5 off1 "k+1" -> "(k)"`:                   "constant expression",
		`s.go:28:7 off1 "1" -> "2"`:                       "constant expression",
		`s.go:29:3 drop-call "panic(\"k\")" -> (nothing)`: "dropping panic can leave a missing return",
		// v of a type switch is used in no case.
		`s.go:39:3 drop-call "log(v)" -> (nothing)`: "removes a use of a type switch variable",
	}, alone)
}
