package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docCommands returns the dmutexcheck command lines that text shows,
// each as its arguments: in code blocks ("go run ./cmd/dmutexcheck ..."
// or "dmutexcheck ..." up to a # comment) and in code spans, which may
// be broken across lines. A span that shows syntax rather than a
// command (with | or [) is left out.
func docCommands(text string) [][]string {
	var cmds [][]string
	add := func(s string) {
		s, _, _ = strings.Cut(s, " #")
		s = strings.TrimSpace(s)
		for _, prefix := range []string{"go run ./cmd/dmutexcheck", "dmutexcheck", "./dmutexcheck"} {
			if rest, ok := strings.CutPrefix(s, prefix); ok && (rest == "" || rest[0] == ' ') {
				var args []string
				for _, f := range strings.Fields(rest) {
					args = append(args, strings.Trim(f, `'"`))
				}
				cmds = append(cmds, args)
				return
			}
		}
	}
	inBlock := false
	var prose strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			add(line)
		} else {
			prose.WriteString(line + "\n")
		}
	}
	for _, m := range codeSpan.FindAllStringSubmatch(prose.String(), -1) {
		if span := strings.ReplaceAll(m[1], "\n", " "); !strings.ContainsAny(span, "|[") {
			add(span)
		}
	}
	return cmds
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// TestDocCommandsParse runs every dmutexcheck command that the README
// and the pages under docs/ show, with a context that is already
// cancelled: each must get past the parsing and checking of its flags to
// the model checker (exit 3, undecided, with "interrupted at", or 0 for
// -list),
// so that a command shown to users cannot lose a required flag or name
// one that is gone.
func TestDocCommandsParse(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	files = append([]string{"../../README.md"}, files...)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	total := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, args := range docCommands(string(b)) {
			total++
			var stdout, stderr bytes.Buffer
			code := run(ctx, args, &stdout, &stderr)
			first, _, _ := strings.Cut(stderr.String(), "\n")
			if code != 0 || !slices.Contains(args, "-list") {
				assert.True(t, strings.HasPrefix(first, "dmutexcheck: interrupted at "), "%s: dmutexcheck %s: %s", file, strings.Join(args, " "), first)
			}
			assert.Contains(t, []int{0, exitUndecided}, code, "%s: dmutexcheck %s", file, strings.Join(args, " "))
		}
	}
	assert.GreaterOrEqual(t, total, 10, "the README shows many dmutexcheck commands")
}

func TestDocCommands(t *testing.T) {
	text := "Run\n\n```sh\ngo run ./cmd/dmutexcheck -alg lamport -n 3   # a comment\n./dmutexpeer -id 0\n```\n\n" +
		"and (`dmutexcheck -crash any\n-recovery`), not `dmutexcheck -detector perfect|imperfect` nor `dmutexchecker`."
	assert.Equal(t, [][]string{{"-alg", "lamport", "-n", "3"}, {"-crash", "any", "-recovery"}}, docCommands(text))
}
