package main

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A typed file is one file of a type-checked package, with what the
// schemata mode needs to know about it: which mutants would not compile
// on their own although their wrapped form does. Those must be built on
// their own (the old way), so that a mutant that does not compile is never
// counted, whatever the mode.
type typed struct {
	fset  *token.FileSet
	file  *ast.File
	tf    *token.File
	info  *types.Info
	pkg   *types.Package
	exprs map[span]ast.Expr
	// realUses holds, per local variable and imported package name of
	// the file, the offsets of the uses that count as uses for the
	// compiler's "declared and not used": not the target of an
	// assignment or of ++ and --.
	realUses map[types.Object][]int
	locals   map[types.Object]bool
	implicit map[types.Object]bool // the variables of type switches
}

// loadTyped type-checks the package in dir and returns its file name,
// whose source must be src.
func loadTyped(dir, name string, src []byte) (*typed, error) {
	bp, err := build.Default.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	exports, err := exportFiles(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	var target *ast.File
	for _, f := range append(bp.GoFiles, bp.CgoFiles...) {
		var b []byte
		if f == filepath.Base(name) {
			b = src
		} else if b, err = os.ReadFile(filepath.Join(dir, f)); err != nil {
			return nil, err
		}
		af, err := parser.ParseFile(fset, f, b, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, af)
		if f == filepath.Base(name) {
			target = af
		}
	}
	if target == nil {
		return nil, fmt.Errorf("%s is not among the package's files", name)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	return checkTyped(fset, bp.ImportPath, files, target, imp)
}

// checkTyped type-checks the package of files, of which target is the
// file to mutate.
func checkTyped(fset *token.FileSet, path string, files []*ast.File, target *ast.File, imp types.Importer) (*typed, error) {
	info := &types.Info{
		Types:     map[ast.Expr]types.TypeAndValue{},
		Defs:      map[*ast.Ident]types.Object{},
		Uses:      map[*ast.Ident]types.Object{},
		Implicits: map[ast.Node]types.Object{},
	}
	conf := types.Config{Importer: imp}
	pkg, err := conf.Check(path, fset, files, info)
	if err != nil {
		return nil, err
	}
	t := &typed{
		fset: fset, file: target, tf: fset.File(target.Pos()), info: info, pkg: pkg,
		exprs:    map[span]ast.Expr{},
		realUses: map[types.Object][]int{},
		locals:   map[types.Object]bool{},
		implicit: map[types.Object]bool{},
	}
	t.index()
	return t, nil
}

// exportFiles lists the export data of every dependency of the package in
// dir, building what is missing (go list -export).
func exportFiles(dir string) (map[string]string, error) {
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %v\n%s", err, stderr.Bytes())
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), " "); ok && file != "" {
			m[path] = file
		}
	}
	return m, sc.Err()
}

func (t *typed) off(p token.Pos) int { return t.fset.Position(p).Offset }

func (t *typed) span(n ast.Node) span { return span{t.off(n.Pos()), t.off(n.End())} }

// index records the file's expressions by span, its local variables and
// the uses that count.
func (t *typed) index() {
	var params []span // the parameters and results of function literals
	var bodies []span // the bodies of declared functions
	for _, d := range t.file.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
			bodies = append(bodies, t.span(fd.Body))
		}
	}
	notUse := map[*ast.Ident]bool{}
	ast.Inspect(t.file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			params = append(params, t.span(n.Type))
		case *ast.AssignStmt:
			for _, e := range n.Lhs {
				if id, ok := ast.Unparen(e).(*ast.Ident); ok {
					notUse[id] = true
				}
			}
		case *ast.IncDecStmt:
			if id, ok := ast.Unparen(n.X).(*ast.Ident); ok {
				notUse[id] = true
			}
		case ast.Expr:
			t.exprs[t.span(n)] = n
		}
		return true
	})
	within := func(p int, ss []span) bool {
		for _, s := range ss {
			if s.off <= p && p < s.end {
				return true
			}
		}
		return false
	}
	for _, obj := range t.info.Defs {
		v, ok := obj.(*types.Var)
		if !ok || v.IsField() || t.fset.File(v.Pos()) != t.tf {
			continue
		}
		if p := t.off(v.Pos()); within(p, bodies) && !within(p, params) {
			t.locals[v] = true
		}
	}
	for n, obj := range t.info.Implicits {
		if _, ok := n.(*ast.CaseClause); ok {
			t.implicit[obj] = true
		}
	}
	for id, obj := range t.info.Uses {
		if t.fset.File(id.Pos()) != t.tf || notUse[id] {
			continue
		}
		switch obj.(type) {
		case *types.Var, *types.PkgName:
			t.realUses[obj] = append(t.realUses[obj], t.off(id.Pos()))
		}
	}
}

// alone says why mutant m must be built on its own, or "" if its wrapped
// form compiles exactly when the mutant alone does.
func (t *typed) alone(m mutant) string {
	switch m.kind {
	case kindCmp, kindLogic, kindOffByOne:
		// A constant expression is checked by the compiler (overflow,
		// division by zero); its wrapped form is not constant.
		if e := t.exprs[m.node]; e == nil {
			return "no expression at the mutant"
		} else if tv := t.info.Types[e]; tv.Value != nil {
			return "constant expression"
		}
		return ""
	case kindCond:
		return t.removes(span{m.off, m.end})
	default: // the drops
		s := span{m.off, m.end}
		if e, ok := t.exprs[s].(*ast.CallExpr); ok {
			if id, ok := ast.Unparen(e.Fun).(*ast.Ident); ok {
				if _, ok := t.info.Uses[id].(*types.Builtin); ok && id.Name == "panic" {
					return "dropping panic can leave a missing return"
				}
			}
		}
		return t.removes(s)
	}
}

// removes says what removing the code in s would leave unused, or "".
func (t *typed) removes(s span) string {
	in := func(p int) bool { return s.off <= p && p < s.end }
	var why string
	ast.Inspect(t.file, func(n ast.Node) bool {
		if why != "" || n == nil {
			return false
		}
		if sp := t.span(n); sp.end <= s.off || sp.off >= s.end {
			return false
		}
		id, ok := n.(*ast.Ident)
		if !ok || !in(t.off(id.Pos())) {
			return true
		}
		obj := t.info.Uses[id]
		switch {
		case obj == nil:
		case t.implicit[obj]:
			why = "removes a use of a type switch variable"
		case t.locals[obj] || isPkgName(obj):
			if t.fset.File(obj.Pos()) == t.tf && in(t.off(obj.Pos())) {
				break // declared inside what is removed
			}
			rest := 0
			for _, p := range t.realUses[obj] {
				if !in(p) {
					rest++
				}
			}
			if rest == 0 {
				why = "removes the last use of " + obj.Name()
			}
		}
		return true
	})
	return why
}

func isPkgName(obj types.Object) bool {
	_, ok := obj.(*types.PkgName)
	return ok
}
