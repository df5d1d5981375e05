package dmutex

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGoDirectiveIsTheFloor checks that go.mod asks for no newer Go than
// the newest that a dependency requires: the module's own code needs Go
// 1.25 (sync.WaitGroup.Go), below what its dependencies need, so the
// dependencies set the floor, and a higher directive would turn away users
// for nothing.
func TestGoDirectiveIsTheFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Main}} {{.Path}} {{.GoVersion}}", "all").Output()
	require.NoError(t, err)
	var own, floor, floorMod string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue // a module without a go directive
		}
		if f[0] == "true" {
			own = f[2]
			continue
		}
		if compareGo(f[2], floor) > 0 {
			floor, floorMod = f[2], f[1]
		}
	}
	require.NotEmpty(t, own)
	assert.Equal(t, 0, compareGo(own, floor), "go.mod says go %s; the newest a dependency needs is %s (%s)", own, floor, floorMod)
	assert.GreaterOrEqual(t, compareGo(own, "1.25"), 0, "the module's code uses sync.WaitGroup.Go (Go 1.25)")
}

// compareGo compares two Go versions such as "1.26.0" and "1.25", treating
// missing parts as 0; "" is older than any version.
func compareGo(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	if a == "" || b == "" {
		return strings.Compare(a, b)
	}
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// TestLicenseNamed checks that the module ships a LICENSE and that the
// README names the same license.
func TestLicenseNamed(t *testing.T) {
	lic, err := os.ReadFile("LICENSE")
	require.NoError(t, err)
	first, _, _ := strings.Cut(string(lic), "\n")
	name, ok := strings.CutSuffix(strings.TrimSpace(first), " License")
	require.True(t, ok, "LICENSE should open with the license's name, got %q", first)
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	assert.Contains(t, string(readme), "\n## License\n\n"+name+";", "README's License section names %s", name)
}

// TestREADMEOpening checks the README's first screen: one or two sentences
// on what dmutex is and is not, then exactly two commands, the report and
// the tests, where the tests' command is the one .ci/run runs.
func TestREADMEOpening(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	body, ok := strings.CutPrefix(string(readme), "# dmutex\n\n")
	require.True(t, ok, "README should open with its title")
	intro, rest, ok := strings.Cut(body, "```sh\n")
	require.True(t, ok, "README has no sh block")
	block, _, ok := strings.Cut(rest, "```\n")
	require.True(t, ok, "README's first sh block is not closed")

	prose := strings.Join(strings.Fields(intro), " ")
	sentences := strings.Count(prose+" ", ". ")
	assert.True(t, sentences >= 1 && sentences <= 2, "README should open with one or two sentences, has %d: %q", sentences, prose)
	assert.Contains(t, prose, " is not ", "the opening should say what dmutex is not")

	var cmds []string
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		cmds = append(cmds, strings.TrimSpace(cmd))
	}
	require.Len(t, cmds, 2, "README's first block should hold exactly two commands: %q", block)
	assert.Equal(t, "go run ./cmd/dmutexbench", cmds[0])
	ci, err := os.ReadFile(".ci/run")
	require.NoError(t, err)
	assert.Contains(t, strings.Split(string(ci), "\n"), cmds[1], ".ci/run should run the README's test command %q", cmds[1])
}

// TestREADMELeadsToPages checks the README's length and its links: it
// stays under 250 lines, its computed tables living on pages under docs/,
// and every relative link of the README and of those pages names a file
// that exists and, with a #fragment, a heading of that file (GitHub's
// anchors: lower case, punctuation dropped, spaces as hyphens).
func TestREADMELeadsToPages(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	assert.Less(t, strings.Count(string(readme), "\n"), 250, "README.md should stay under 250 lines; move computed tables to docs/")

	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	links := 0
	for _, file := range append([]string{"README.md"}, pages...) {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			path, frag, _ := strings.Cut(target, "#")
			if path == "" {
				path = file
			} else {
				path = filepath.Join(filepath.Dir(file), path)
			}
			body, err := os.ReadFile(path)
			if !assert.NoError(t, err, "%s links %s", file, target) || frag == "" {
				continue
			}
			assert.Contains(t, mdAnchors(string(body)), frag, "%s links %s: no such heading", file, target)
		}
	}
	assert.Greater(t, links, 10)
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// mdAnchors returns the anchors GitHub gives the headings of a Markdown
// text.
func mdAnchors(text string) []string {
	var out []string
	inBlock := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if inBlock || !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
