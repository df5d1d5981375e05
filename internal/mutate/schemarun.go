package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// helperName is the file the schema adds to the package.
const helperName = "zz_mutate_schema.go"

// compileErr matches a compiler error's position.
var compileErr = regexp.MustCompile(`(?m)^(\S+\.go):(\d+):(\d+): `)

// schemata judges the mutants ms of one file with one build: those that
// can be wrapped go behind the switch, the others are built alone as in
// the default mode. emit gets the results in the order of ms.
func (r *runner) schemata(file string, src []byte, ms []mutant, emit func(mutant, result)) {
	start := time.Now()
	in := make([]bool, len(ms))
	t, err := loadTyped(r.pkg, file, src)
	if err != nil {
		fmt.Fprintf(r.log, "# %s: no type information, every mutant built alone: %v\n", file, err)
	}
	for i, m := range ms {
		if t == nil {
			continue
		}
		if why := t.alone(m); why != "" {
			fmt.Fprintf(r.log, "# alone: %s: %s\n", m, why)
		} else {
			in[i] = true
		}
	}
	pkgName := ""
	if t != nil {
		pkgName = t.pkg.Name()
	}
	bin := filepath.Join(r.dir, "schema.test")
	built := false
	for round := 0; t != nil && round < 20 && count(in) > 0; round++ {
		sc, err := buildSchema(src, ms, in)
		if err != nil {
			fmt.Fprintf(r.log, "# %s: no schema, every mutant built alone: %v\n", file, err)
			break
		}
		out, err := r.build(bin, map[string][]byte{file: sc.src, helperName: helperFile(pkgName)}, true)
		if err == nil {
			built = true
			break
		}
		// Send the mutants the compiler points at to the old way.
		moved := 0
		for _, e := range compileErr.FindAllSubmatch(out, -1) {
			if filepath.Base(string(e[1])) != filepath.Base(file) {
				continue
			}
			line, _ := strconv.Atoi(string(e[2]))
			col, _ := strconv.Atoi(string(e[3]))
			for _, i := range sc.culprits(offset(sc.src, line, col)) {
				if in[i] {
					fmt.Fprintf(r.log, "# alone: %s: its wrapped form does not compile\n", ms[i])
					in[i] = false
					moved++
				}
			}
		}
		if moved == 0 {
			fmt.Fprintf(r.log, "# %s: the schema does not compile, every mutant built alone:\n%s", file, out)
			break
		}
	}
	if !built {
		for i := range in {
			in[i] = false
		}
	}
	if built {
		fmt.Fprintf(r.log, "# %s: %d mutants in the schema, %d alone, built in %.1fs\n",
			file, count(in), len(ms)-count(in), time.Since(start).Seconds())
		// The schema with no mutant switched on must pass every stage.
		if status, test := r.runStages(bin, []string{envID + "=0"}); status != "SURVIVED" {
			fatal(fmt.Errorf("%s: the schema's unmutated run does not pass: %s(%s)", file, status, test))
		}
	} else if res := r.try(mutant{file: file}, nil); res.Status != "SURVIVED" {
		fatal(fmt.Errorf("the unmutated tests do not pass: %s(%s)", res.Status, res.Test))
	}
	for i, m := range ms {
		if !in[i] {
			emit(m, r.try(m, src))
			continue
		}
		res := result{
			Mutant: m.String(), File: m.file, Line: m.line, Col: m.col,
			Kind: m.kind, Orig: m.orig, Repl: m.repl,
		}
		t0 := time.Now()
		res.Status, res.Test = r.runStages(bin, []string{envID + "=" + strconv.Itoa(id(i))})
		res.Seconds = time.Since(t0).Seconds()
		emit(m, res)
	}
}

func count(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}
