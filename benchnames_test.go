package dmutex

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// benchNameScheme is the one scheme of sub-benchmark names: key=value
// segments joined by "/", such as "alg=raymond/n=8/load=all", so that
// benchstat can group and filter by key.
var benchNameScheme = regexp.MustCompile(`^[a-z]+=[^/=]+(/[a-z]+=[^/=]+)*$`)

// TestBenchmarkNames reads the package's benchmark files and checks that
// every name given to b.Run, a literal or a fmt.Sprintf format, follows
// benchNameScheme.
func TestBenchmarkNames(t *testing.T) {
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	fset := token.NewFileSet()
	seen := 0
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 || !isBRun(call.Fun) {
				return true
			}
			name, ok := nameFormat(call.Args[0])
			if !assert.True(t, ok, "%v: b.Run with a name that is neither a literal nor fmt.Sprintf", fset.Position(call.Pos())) {
				return true
			}
			seen++
			example := strings.NewReplacer("%s", "x", "%d", "1", "%v", "x").Replace(name)
			assert.Regexp(t, benchNameScheme, example, "%v: benchmark name %q", fset.Position(call.Pos()), name)
			return true
		})
	}
	assert.NotZero(t, seen, "no b.Run found: the test reads nothing")
}

// isBRun reports whether fun is b.Run for a receiver named b.
func isBRun(fun ast.Expr) bool {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Run" {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "b"
}

// nameFormat returns the string literal e, or the format of fmt.Sprintf(e, ...).
func nameFormat(e ast.Expr) (string, bool) {
	if call, ok := e.(*ast.CallExpr); ok {
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" && len(call.Args) > 0 {
			e = call.Args[0]
		}
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
