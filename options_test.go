package dmutex

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryOptionAppliesToAClusterOrPeer checks that Option holds only
// what a cluster or a peer accepts: every exported function of the
// package that returns an Option is listed here, and each option listed
// applies to New or NewPeer. The simulator's and the world's own settings
// are fields of SimConfig and WorldConfig.
func TestEveryOptionAppliesToAClusterOrPeer(t *testing.T) {
	options := map[string]Option{
		"WithFaults":           WithFaults(Faults{}),
		"WithFenceFloor":       WithFenceFloor(0),
		"WithImplicitReplies":  WithImplicitReplies(),
		"WithObserver":         WithObserver(nil),
		"WithRecovery":         WithRecovery(),
		"WithTree":             WithTree(nil),
		"WithUnreachableAfter": WithUnreachableAfter(time.Second),
		"WithVotingSets":       WithVotingSets(nil),
	}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var found []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !fd.Name.IsExported() || fd.Type.Results == nil || len(fd.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fd.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "Option" {
				found = append(found, fd.Name.Name)
			}
		}
	}
	assert.ElementsMatch(t, slices.Collect(maps.Keys(options)), found, "the exported constructors of an Option")
	for name, o := range options {
		assert.Equal(t, name, o.String())
		assert.NotZero(t, o.where&(forCluster|forPeer), "%s applies to neither a cluster nor NewPeer", name)
	}
}
