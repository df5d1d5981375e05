package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"sort"
	"strings"
)

// A mutant is one small change to one file: the bytes [off, end) of the
// source are replaced by repl.
type mutant struct {
	file      string // as given on the command line
	line, col int
	kind      string // one of the kinds below
	off, end  int
	orig      string // the replaced text
	repl      string

	// For a mutant of an operator or of the 1 of x ± 1: the binary
	// expression it belongs to, its operands and its operator, which the
	// schemata mode needs to wrap the whole expression.
	node, x, y span
	op         token.Token
}

// A span is the byte range [off, end) of a syntax node in the source.
type span struct{ off, end int }

// Mutation kinds, selectable with -kinds.
const (
	kindCmp        = "cmp"         // a comparison to its boundary or its negation
	kindLogic      = "logic"       // && <-> ||
	kindCond       = "cond"        // an if/case/for condition, or one operand of && or ||, to true or false
	kindOffByOne   = "off1"        // x + 1 and x - 1 to x, and to x + 2, x - 2
	kindDropSend   = "drop-send"   // drop a call statement that sends or steps
	kindDropCall   = "drop-call"   // drop any other call statement
	kindDropAssign = "drop-assign" // drop an assignment (= op=; := rarely compiles)
	kindDropIncDec = "drop-incdec" // drop x++ or x--
)

var allKinds = []string{kindCmp, kindLogic, kindCond, kindOffByOne, kindDropSend, kindDropCall, kindDropAssign, kindDropIncDec}

// sendCall matches the callee of a call statement that hands a message on
// or steps a machine: dropping one is the classic lost-message mutant.
var sendCall = regexp.MustCompile(`(^|\.)(send|Send|broadcast|stepLocked|step|deliver|enqueue|push)[A-Za-z]*$`)

// cmpMutants lists, for each comparison, its boundary and its negation.
var cmpMutants = map[token.Token][]token.Token{
	token.LSS: {token.LEQ, token.GEQ},
	token.LEQ: {token.LSS, token.GTR},
	token.GTR: {token.GEQ, token.LEQ},
	token.GEQ: {token.GTR, token.LSS},
	token.EQL: {token.NEQ},
	token.NEQ: {token.EQL},
}

func (m mutant) String() string {
	return fmt.Sprintf("%s:%d:%d %s %s -> %s", m.file, m.line, m.col, m.kind, quote(m.orig), quote(m.repl))
}

// quote shows a snippet on one line, shortened.
func quote(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	if s == "" {
		return "(nothing)"
	}
	return fmt.Sprintf("%q", s)
}

// apply returns src with the mutation applied.
func (m mutant) apply(src []byte) []byte {
	out := make([]byte, 0, len(src)+len(m.repl))
	out = append(out, src[:m.off]...)
	out = append(out, m.repl...)
	return append(out, src[m.end:]...)
}

// generate lists the mutants of one file's source, in source order, of the
// kinds in kinds. Functions whose name matches skip are left alone.
func generate(name string, src []byte, kinds map[string]bool, skip *regexp.Regexp) ([]mutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	g := &gen{fset: fset, src: src, name: name, kinds: kinds}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		if skip != nil && skip.MatchString(fd.Name.Name) {
			continue
		}
		ast.Inspect(fd.Body, g.visit)
	}
	sort.SliceStable(g.ms, func(i, j int) bool {
		a, b := g.ms[i], g.ms[j]
		if a.off != b.off {
			return a.off < b.off
		}
		return a.end > b.end
	})
	// Drop exact duplicates (a condition that is also an operand).
	out := g.ms[:0]
	seen := map[string]bool{}
	for _, m := range g.ms {
		k := fmt.Sprintf("%d/%d/%s", m.off, m.end, m.repl)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, m)
	}
	return out, nil
}

type gen struct {
	fset  *token.FileSet
	src   []byte
	name  string
	kinds map[string]bool
	ms    []mutant
}

// add adds a mutant of the given kind, if that kind is wanted, and says
// whether it did.
func (g *gen) add(kind string, from, to token.Pos, repl string) bool {
	if !g.kinds[kind] {
		return false
	}
	p := g.fset.Position(from)
	off, end := p.Offset, g.fset.Position(to).Offset
	g.ms = append(g.ms, mutant{
		file: g.name, line: p.Line, col: p.Column, kind: kind,
		off: off, end: end, orig: string(g.src[off:end]), repl: repl,
	})
	return true
}

// op adds a mutant replacing the operator of a binary expression.
func (g *gen) op(kind string, b *ast.BinaryExpr, to token.Token) {
	if g.add(kind, b.OpPos, b.OpPos+token.Pos(len(b.Op.String())), to.String()) {
		g.inBinary(b)
	}
}

// inBinary records on the last mutant the binary expression it is part of.
func (g *gen) inBinary(b *ast.BinaryExpr) {
	m := &g.ms[len(g.ms)-1]
	m.node, m.x, m.y, m.op = g.span(b), g.span(b.X), g.span(b.Y), b.Op
}

func (g *gen) span(n ast.Node) span {
	return span{g.fset.Position(n.Pos()).Offset, g.fset.Position(n.End()).Offset}
}

func (g *gen) text(e ast.Node) string {
	return string(g.src[g.fset.Position(e.Pos()).Offset:g.fset.Position(e.End()).Offset])
}

// cond adds the true and false mutants of a boolean condition, unless it
// already is a constant.
func (g *gen) cond(e ast.Expr, values ...string) {
	if id, ok := ast.Unparen(e).(*ast.Ident); ok && (id.Name == "true" || id.Name == "false") {
		return
	}
	for _, v := range values {
		g.add(kindCond, e.Pos(), e.End(), v)
	}
}

func (g *gen) visit(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.BinaryExpr:
		if to, ok := cmpMutants[n.Op]; ok {
			for _, t := range to {
				g.op(kindCmp, n, t)
			}
		}
		switch n.Op {
		case token.LAND, token.LOR:
			// Drop one operand: true in a chain of &&, false in one of ||.
			// An operand that is itself the same chain is visited on its own.
			other, neutral := token.LOR, "true"
			if n.Op == token.LOR {
				other, neutral = token.LAND, "false"
			}
			g.op(kindLogic, n, other)
			for _, e := range []ast.Expr{n.X, n.Y} {
				if b, ok := e.(*ast.BinaryExpr); !ok || b.Op != n.Op {
					g.cond(e, neutral)
				}
			}
		case token.ADD, token.SUB:
			if lit, ok := ast.Unparen(n.Y).(*ast.BasicLit); ok && lit.Kind == token.INT && lit.Value == "1" {
				// x + 1 -> x, and x + 1 -> x + 2.
				if g.add(kindOffByOne, n.Pos(), n.End(), "("+g.text(n.X)+")") {
					g.inBinary(n)
				}
				if g.add(kindOffByOne, lit.Pos(), lit.End(), "2") {
					g.inBinary(n)
				}
			}
		}
	case *ast.IfStmt:
		g.cond(n.Cond, "true", "false")
	case *ast.ForStmt:
		if n.Cond != nil {
			g.cond(n.Cond, "false")
		}
	case *ast.SwitchStmt:
		if n.Tag == nil {
			for _, s := range n.Body.List {
				for _, e := range s.(*ast.CaseClause).List {
					g.cond(e, "true", "false")
				}
			}
		}
	case *ast.BlockStmt:
		g.stmts(n.List)
	case *ast.CaseClause:
		g.stmts(n.Body)
	case *ast.CommClause:
		g.stmts(n.Body)
	}
	return true
}

// stmts adds the drop mutants of the statements of one block.
func (g *gen) stmts(list []ast.Stmt) {
	for _, s := range list {
		switch s := s.(type) {
		case *ast.ExprStmt:
			call, ok := s.X.(*ast.CallExpr)
			if !ok {
				continue
			}
			kind := kindDropCall
			if sendCall.MatchString(g.text(call.Fun)) {
				kind = kindDropSend
			}
			g.add(kind, s.Pos(), s.End(), "")
		case *ast.AssignStmt:
			if s.Tok == token.DEFINE {
				// Dropping a definition leaves its names undefined: it
				// would not compile.
				continue
			}
			g.add(kindDropAssign, s.Pos(), s.End(), "")
		case *ast.IncDecStmt:
			g.add(kindDropIncDec, s.Pos(), s.End(), "")
		}
	}
}
