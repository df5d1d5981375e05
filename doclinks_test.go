package dmutex

import (
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDocLinks reads the package's doc comments and checks every doc link
// ([Locker], [Peer.Close], ...) names something the package declares, so
// that a renamed identifier cannot leave a link that go doc prints as
// plain text; and that the package documentation links the main names.
func TestDocLinks(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var files []*ast.File
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			f, err := parser.ParseFile(fset, e.Name(), nil, parser.ParseComments)
			require.NoError(t, err)
			files = append(files, f)
		}
	}
	// Every exported name, and Type.Method for methods and fields.
	names := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					names[d.Name.Name] = true
				} else {
					names[recvName(d.Recv.List[0].Type)+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						names[s.Name.Name] = true
						addMembers(names, s)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							names[n.Name] = true
						}
					}
				}
			}
		}
	}
	// Every [Name] the parser can read as a link is one; whether it
	// resolves is what this test checks.
	p := comment.Parser{
		LookupPackage: func(name string) (string, bool) { return "", false },
		LookupSym:     func(recv, name string) bool { return true },
	}
	links := map[string]bool{}
	check := func(where string, text string) {
		doc := p.Parse(text)
		for _, b := range doc.Content {
			forEachLink(b, func(l *comment.DocLink) {
				name := l.Name
				if l.Recv != "" {
					name = l.Recv + "." + l.Name
				}
				if l.ImportPath != "" {
					return // another package's; go vet does not check those either
				}
				links[name] = true
				assert.True(t, names[name], "%s: doc link [%s] names nothing in the package", where, name)
			})
		}
	}
	for _, f := range files {
		if f.Doc != nil {
			check("package doc", f.Doc.Text())
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var doc *ast.CommentGroup
			switch n := n.(type) {
			case *ast.FuncDecl:
				doc = n.Doc
			case *ast.GenDecl:
				doc = n.Doc
			case *ast.TypeSpec:
				doc = n.Doc
			case *ast.ValueSpec:
				doc = n.Doc
			case *ast.Field:
				doc = n.Doc
			}
			if doc != nil {
				check(fset.Position(doc.Pos()).String(), doc.Text())
			}
			return true
		})
	}
	for _, want := range []string{"Locker", "ErrClosed", "Peer", "NewPeer", "ChanNetwork", "Observer", "WithObserver"} {
		assert.True(t, links[want], "no doc links to %s", want)
	}
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

func addMembers(names map[string]bool, s *ast.TypeSpec) {
	switch t := s.Type.(type) {
	case *ast.InterfaceType:
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				names[s.Name.Name+"."+n.Name] = true
			}
		}
	case *ast.StructType:
		for _, f := range t.Fields.List {
			for _, n := range f.Names {
				names[s.Name.Name+"."+n.Name] = true
			}
		}
	}
}

// forEachLink calls f for every doc link in block b.
func forEachLink(b comment.Block, f func(*comment.DocLink)) {
	var texts func([]comment.Text)
	texts = func(ts []comment.Text) {
		for _, t := range ts {
			switch t := t.(type) {
			case *comment.DocLink:
				f(t)
			case *comment.Link:
				texts(t.Text)
			case *comment.Italic, comment.Plain:
			}
		}
	}
	switch b := b.(type) {
	case *comment.Paragraph:
		texts(b.Text)
	case *comment.Heading:
		texts(b.Text)
	case *comment.List:
		for _, it := range b.Items {
			for _, c := range it.Content {
				forEachLink(c, f)
			}
		}
	}
}

// TestPackageDocLeadsWithTheLockAPI checks the order in which the package
// documentation introduces names, since go doc sorts the index
// alphabetically: every name of the lock API is linked before the first
// link to the simulator, the world, the checker or the cost models.
func TestPackageDocLeadsWithTheLockAPI(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments)
	require.NoError(t, err)
	require.NotNil(t, f.Doc)
	p := comment.Parser{
		LookupPackage: func(name string) (string, bool) { return "", false },
		LookupSym:     func(recv, name string) bool { return true },
	}
	first := map[string]int{} // name -> the order of its first link
	for _, b := range p.Parse(f.Doc.Text()).Content {
		forEachLink(b, func(l *comment.DocLink) {
			name := l.Name
			if l.Recv != "" {
				name = l.Recv + "." + l.Name
			}
			if _, ok := first[name]; !ok {
				first[name] = len(first)
			}
		})
	}
	lock := []string{"Locker", "New", "Cluster", "Cluster.Peer", "Peer", "NewPeer", "Transport", "Option",
		"ErrClosed", "ErrLocked", "ErrPeerUnreachable", "ErrHoldLost", "ErrInvalidConfig"}
	tools := []string{"Simulation", "NewSimulation", "SimConfig", "World", "NewWorld", "WorldConfig",
		"Check", "CheckConfig", "Variants", "RunTimed", "MeasureRecovery"}
	last := -1
	for _, name := range lock {
		i, ok := first[name]
		require.True(t, ok, "the package doc does not link %s", name)
		last = max(last, i)
	}
	for _, name := range tools {
		i, ok := first[name]
		require.True(t, ok, "the package doc does not link %s", name)
		assert.Greater(t, i, last, "[%s] is linked before the last of the lock API", name)
	}
}
