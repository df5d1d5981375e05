package dmutex

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The machine-contract test. For every algorithm (Algorithms, with each
// option that applies to it) and every variant, it takes the machines of
// seeded random runs of a World, requests, tries, crashes and suspicions
// included, and checks of each state, field by field through reflection:
//
//   - clone returns an equal machine that shares no memory with the
//     original: every change to a field of either leaves the other as it
//     was;
//   - assign, where the machine implements it, does the same into a spare
//     machine from another state;
//   - every change to a field changes the encoding (appendState and, for
//     a clockMachine, appendStateIn with and without noTries), unless
//     unseenFields lists the field for that encoding, with its reason and
//     the states it holds in.
//
// A change is one of: a bool flipped, a number plus one, a slice one
// element longer, a nil pointer made non-nil or a non-nil one made nil,
// applied to each leaf of the field in turn (every element of a slice,
// every field of a struct). A listed omission that no state needs fails
// too, so the list stays true.

// An unseenField is a field an encoding leaves out on purpose, or sees
// only in part: a change at path (the field, or an element such as
// "last[2]") may leave the encoding as it is when when reports true, or
// always if when is nil.
type unseenField struct {
	field string // the field's name; an embedding wrapper's fields are its machine's
	enc   string // the encoding: encState, encIn, encInNoTries, or "" for all
	why   string
	when  func(m machine, path string) bool
}

// The encodings a machine may have.
const (
	encState     = "appendState"
	encIn        = "appendStateIn"
	encInNoTries = "appendStateIn(noTries)"
)

// scratchFields are fields that are not state at all: clone and assign
// need not copy them, and no encoding sees them.
var scratchFields = map[Algorithm]map[string]string{
	SuzukiKasami: {"queued": "scratch for release and validToken, rebuilt at every use"},
	Maekawa:      {"local": "messages to itself within one step, empty between steps"},
}

// fixed are fields every machine of a world keeps from its construction:
// the peer's identity and the cluster's configuration, which the World
// encodes by position and by its configuration rather than per machine.
var fixedFields = map[string]string{
	"id":       "the peer's identity: the World encodes machines by position",
	"n":        "the cluster's size, fixed for the world",
	"implicit": "WithImplicitReplies, fixed for the world",
	"recovery": "WithRecovery, fixed for the world",
	"set":      "the voting set, fixed for the world (WithVotingSets)",
}

// unseenFields lists, per algorithm, what each encoding leaves out on
// purpose beyond fixedFields and scratchFields.
var unseenFields = map[Algorithm][]unseenField{
	RicartAgrawala: {
		{field: "ngranted", why: "the count of granted's true entries, which the encoding holds"},
		{field: "suspected", why: "read only with WithRecovery", when: func(m machine, _ string) bool { return !inner[ricart](m).recovery }},
	},
	Lamport: {
		{field: "ts", why: "read only while a request or try waits or the peer is inside, and each request overwrites it", when: func(m machine, _ string) bool {
			l := inner[lamport](m)
			return !l.wanting && !l.held
		}},
		{field: "answers", why: "read only while a try waits, and each try resets it", when: func(m machine, _ string) bool { return !inner[lamport](m).trying }},
		{field: "last", why: "read only by the entry rule of a waiting request, as whether j sent something later than it; each message from j overwrites it", when: func(m machine, path string) bool {
			l := inner[lamport](m)
			j, ok := pathIndex(path)
			return !l.wanting || l.trying || !ok || j == l.id || l.last[j] != l.ts // +1 flips "later" only from ts
		}},
		{field: "queue", enc: encInNoTries, why: "once no try will be made or delivered, only whether j is queued and, while a request waits, whether j goes before it are read", when: func(m machine, path string) bool {
			l := inner[lamport](m)
			j, ok := pathIndex(path)
			if !ok || l.queue[j] == 0 {
				return false
			}
			waits := l.wanting && !l.trying
			return !waits || j == l.id || before(l.queue[j], j, l.ts, l.id) == before(l.queue[j]+1, j, l.ts, l.id)
		}},
	},
	Centralized: {
		{field: "inside", why: "read only with WithRecovery (stepRecovery)", when: notCentralizedRecovery},
		{field: "term", why: "read only with WithRecovery (stepRecovery)", when: notCentralizedRecovery},
		{field: "req", why: "read only with WithRecovery (stepRecovery)", when: notCentralizedRecovery},
		{field: "suspected", why: "read only with WithRecovery (stepRecovery)", when: notCentralizedRecovery},
		{field: "collecting", why: "read only with WithRecovery (stepRecovery)", when: notCentralizedRecovery},
		{field: "reported", why: "read only with WithRecovery (stepRecovery)", when: notCentralizedRecovery},
		{field: "nums", why: "read only with WithRecovery (stepRecovery)", when: notCentralizedRecovery},
		{field: "held", why: "read only with WithRecovery (stepRecovery)", when: notCentralizedRecovery},
	},
	Maekawa: {
		{field: "inquiry", why: "inquiry[k] is encoded beside votes[k]; its length is the voting set's, fixed", when: func(_ machine, path string) bool { return path == "inquiry" }},
	},
	SuzukiKasami: {
		{field: "epoch", why: "read only with WithRecovery", when: notSKRecovery},
		{field: "suspected", why: "read only with WithRecovery", when: notSKRecovery},
		{field: "owe", why: "read only with WithRecovery", when: notSKRecovery},
		{field: "sentTo", why: "read only with WithRecovery", when: notSKRecovery},
		{field: "collecting", why: "read only with WithRecovery", when: notSKRecovery},
		{field: "reported", why: "read only with WithRecovery, while collecting, or by the coordinator of the epoch (who the epoch left out)", when: func(m machine, _ string) bool {
			s := inner[suzukiKasami](m)
			return !s.recovery || !s.collecting && s.epoch%uint64(s.n) != uint64(s.id)
		}},
		{field: "sat", why: "read only with WithRecovery while collecting, and reset when collecting starts", when: func(m machine, _ string) bool {
			s := inner[suzukiKasami](m)
			return !s.recovery || !s.collecting
		}},
	},
	AgrawalElAbbadi: {
		{field: "inquiry", why: "inquiry[k] is encoded beside votes[k] (the embedded Maekawa machine's); its length is the quorum's", when: func(_ machine, path string) bool { return path == "inquiry" }},
		{field: "local", why: "messages to itself within one step, empty between steps"},
		{field: "path", why: "the quorum with nobody suspected, fixed by the peer's id and n"},
		{field: "suspected", why: "read only with WithRecovery", when: func(m machine, _ string) bool { return !inner[agrawalElAbbadi](m).recovery }},
		{field: "parked", why: "read only with WithRecovery", when: func(m machine, _ string) bool { return !inner[agrawalElAbbadi](m).recovery }},
	},
	RoucairolCarvalho: {
		{field: "nperm", why: "the count of perm's true entries, which the encoding holds"},
	},
	SinghalDynamic: {
		{field: "nr", why: "the count of rset's true entries, which the encoding holds"},
	},
	LodhaKshemkalyani: {
		{field: "nheard", why: "the count of heard's true entries, which the encoding holds"},
	},
	RicartAgrawalaToken: {
		{field: "token", why: "the token's Queue, which this algorithm never fills (onToken refuses a token with one)", when: func(_ machine, path string) bool { return strings.HasPrefix(path, "token.Queue") }},
	},
	TokenRing: {
		{field: "hop", why: "read only while the token is here; it arrives with the hop", when: func(m machine, _ string) bool { return !inner[tokenRing](m).hold }},
		{field: "next", why: "read only while the token is away; the token brings it up to date", when: func(m machine, _ string) bool { return inner[tokenRing](m).hold }},
		{field: "rest", why: "read only while the token is away; the token brings it up to date", when: func(m machine, _ string) bool { return inner[tokenRing](m).hold }},
		{field: "woken", why: "read only while the token is away; the token brings it up to date", when: func(m machine, _ string) bool { return inner[tokenRing](m).hold }},
	},
}

func notCentralizedRecovery(m machine, _ string) bool { return !inner[centralized](m).recovery }

func notSKRecovery(m machine, _ string) bool { return !inner[suzukiKasami](m).recovery }

// inner returns m as a *T, or the *T a variant's wrapper embeds.
func inner[T any](m machine) *T {
	if p, ok := any(m).(*T); ok {
		return p
	}
	return writable(reflect.ValueOf(m).Elem().Field(0)).Interface().(*T)
}

// pathIndex returns the index of a path such as "last[2]".
func pathIndex(path string) (int, bool) {
	i := strings.IndexByte(path, '[')
	if i < 0 {
		return 0, false
	}
	var j int
	_, err := fmt.Sscanf(path[i:], "[%d]", &j)
	return j, err == nil
}

// TestMachineContract is the machine-contract test; see above.
func TestMachineContract(t *testing.T) {
	type config struct {
		name    string
		alg     Algorithm
		n       int
		variant string
		opts    []Option
	}
	var configs []config
	for _, alg := range Algorithms() {
		for _, extra := range [][]Option{nil, {WithRecovery()}, {WithImplicitReplies()}} {
			opts := extra
			if _, err := NewWorld(alg, 3, WorldConfig{}, opts...); err != nil {
				require.ErrorIs(t, err, ErrInvalidConfig)
				continue // the option does not apply to alg
			}
			name := alg.String()
			for _, o := range extra {
				name += "+" + o.String()
			}
			configs = append(configs, config{name, alg, 3, "", opts})
		}
	}
	for _, v := range Variants() {
		configs = append(configs, config{v.Name, v.Algorithm, max(v.N, 3), v.Name, v.Options})
	}
	used := make(map[*unseenField]bool)
	ran := make(map[Algorithm]bool) // with -run, not every algorithm's configurations run
	var mu sync.Mutex               // guards used and ran: the configurations run in parallel
	// After every configuration, parallel ones included: each entry of
	// unseenFields must have let some field go unseen.
	t.Cleanup(func() {
		for alg, us := range unseenFields {
			if !ran[alg] {
				continue
			}
			for i := range us {
				assert.True(t, used[&us[i]], "%v: unseenFields lists %s (%s), which every state's encoding sees: drop it", alg, us[i].field, us[i].enc)
			}
		}
	})
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			// Pure computation on the test's goroutine: on two cores,
			// two configurations at once halve the wall time.
			t.Parallel()
			mu.Lock()
			ran[c.alg] = true
			mu.Unlock()
			states := contractStates(t, c.alg, c.n, c.variant, c.opts)
			require.NotEmpty(t, states)
			unseen := make(map[string]string) // encoding/field -> an example
			copied := make(map[string]bool)   // what clone and assign got wrong, each once
			for i, m := range states {
				for _, p := range append(checkClone(c.alg, m), checkAssign(t, c.alg, m, states[(i+len(states)/2)%len(states)])...) {
					if !copied[p] {
						copied[p] = true
						t.Error(p)
					}
				}
				for _, enc := range encodings(m) {
					for _, path := range unseenChanges(m, enc.encode) {
						field := strings.SplitN(strings.SplitN(path, "[", 2)[0], ".", 2)[0]
						if _, ok := fixedFields[field]; ok {
							continue
						}
						if _, ok := scratchFields[c.alg][field]; ok {
							continue
						}
						if u := findUnseen(c.alg, field, path, enc.name, m); u != nil {
							mu.Lock()
							used[u] = true
							mu.Unlock()
							continue
						}
						key := enc.name + " " + field
						if _, ok := unseen[key]; !ok {
							unseen[key] = fmt.Sprintf("%s: changing %s leaves the encoding as it is, in state %s", key, path, describeMachine(m))
						}
					}
				}
			}
			keys := make([]string, 0, len(unseen))
			for k := range unseen {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				t.Errorf("%s", unseen[k])
			}
		})
	}
}

// findUnseen returns the entry of unseenFields that lets field go unseen
// by enc in state m, or nil.
func findUnseen(alg Algorithm, field, path, enc string, m machine) *unseenField {
	us := unseenFields[alg]
	for i := range us {
		u := &us[i]
		if u.field == field && (u.enc == "" || u.enc == enc) && (u.when == nil || u.when(m, path)) {
			return u
		}
	}
	return nil
}

func describeMachine(m machine) string {
	if d, ok := m.(describer); ok {
		var parts []string
		for _, f := range d.describe() {
			parts = append(parts, f.Name+"="+f.Value)
		}
		return strings.Join(parts, " ")
	}
	return fmt.Sprintf("%+v", m)
}

// contractSeeds is the number of seeded runs contractStates takes: 6, or
// 2 under raceLight (one over each delivery order; the worlds have no
// goroutines for the race detector to watch, and the contract held on one
// seed when this was written).
func contractSeeds() int {
	if raceLight() {
		return 2
	}
	return 6
}

// contractStates returns copies of the machines of seeded random runs of
// alg's world: every peer's, every few steps.
func contractStates(t *testing.T, alg Algorithm, n int, variant string, opts []Option) []machine {
	var states []machine
	for seed := range uint64(contractSeeds()) {
		cfg := WorldConfig{Variant: variant, Requests: 2, Tries: 2, Network: []Network{NetworkFIFO, NetworkUnordered}[seed%2]}
		w, err := NewWorld(alg, n, cfg, opts...)
		require.NoError(t, err)
		// Faults for the recoveries to act on, as Check injects them.
		w.f.detector, w.f.falseLeft = DetectorImperfect, 1
		w.f.crashLeft = 1
		rng := rand.New(rand.NewPCG(seed, uint64(alg)))
		for step := 0; step < 200; step++ {
			trs := w.Transitions()
			if len(trs) == 0 {
				break
			}
			if _, err := w.Apply(trs[rng.IntN(len(trs))]); err != nil {
				require.True(t, errors.Is(err, ErrViolation), "%v", err)
				break
			}
			if step%3 == 0 {
				for _, m := range w.ms {
					states = append(states, m.clone())
				}
			}
		}
	}
	return states
}

type encoding struct {
	name   string
	encode func(m machine) []byte
}

// encodings returns the encodings m has.
func encodings(m machine) []encoding {
	encs := []encoding{{encState, func(m machine) []byte { return m.appendState(nil) }}}
	if _, ok := m.(clockMachine); ok {
		encs = append(encs,
			encoding{encIn, func(m machine) []byte { return m.(clockMachine).appendStateIn(nil, false, nil) }},
			encoding{encInNoTries, func(m machine) []byte { return m.(clockMachine).appendStateIn(nil, true, nil) }})
	}
	return encs
}

// unseenChanges returns the paths of the changes to m that leave its
// encoding by encode as it is.
func unseenChanges(m machine, encode func(machine) []byte) []string {
	want := encode(m)
	var paths []string
	for i := 0; ; i++ {
		c := copyMachine(m)
		path, ok := changeAt(c, i)
		if !ok {
			return paths
		}
		if got, panicked := encodeSafely(encode, c); !panicked && bytes.Equal(got, want) {
			paths = append(paths, path)
		}
	}
}

// changeAt makes the i-th change to m (see change) and returns its path;
// it reports false when m has fewer changes.
func changeAt(m machine, i int) (string, bool) {
	return change(reflect.ValueOf(m).Elem(), "", &i)
}

func encodeSafely(encode func(machine) []byte, m machine) (b []byte, panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true // the encoding reads the field, if only to fail on it
		}
	}()
	return encode(m), false
}

// checkClone returns what is wrong with m.clone(): unequal to m, or
// sharing memory with it.
func checkClone(alg Algorithm, m machine) (problems []string) {
	ref := copyMachine(m)
	c := m.clone()
	if !sameState(alg, reflect.ValueOf(c), reflect.ValueOf(ref)) {
		return []string{fmt.Sprintf("clone of %T copies not every field:\n got %+v\nwant %+v", m, deref(c), deref(ref))}
	}
	for i := 0; ; i++ {
		orig := copyMachine(m)
		path, ok := changeAt(orig.clone(), i)
		if !ok {
			break
		}
		if !sameState(alg, reflect.ValueOf(orig), reflect.ValueOf(ref)) {
			problems = append(problems, fmt.Sprintf("clone of %T shares memory: changing %s in the clone changes the original", m, path))
		}
		orig = copyMachine(m)
		c := orig.clone()
		changeAt(orig, i)
		if !sameState(alg, reflect.ValueOf(c), reflect.ValueOf(ref)) {
			problems = append(problems, fmt.Sprintf("clone of %T shares memory: changing %s in the original changes the clone", m, path))
		}
	}
	return problems
}

// checkAssign returns what is wrong with a spare machine in another
// state, other, assigned m: unequal to m, or sharing memory with it.
func checkAssign(t *testing.T, alg Algorithm, m, other machine) (problems []string) {
	if _, ok := m.(assigner); !ok {
		return nil
	}
	ref := copyMachine(m)
	spare := copyMachine(other)
	if !spare.(assigner).assign(copyMachine(m)) {
		// A variant's wrapper assigns through its machine, which takes
		// only its own type: the World then clones instead.
		require.True(t, isWrapper(m), "%T refuses to assign a machine of its own type", m)
		return nil
	}
	if !sameState(alg, reflect.ValueOf(spare), reflect.ValueOf(ref)) {
		return []string{fmt.Sprintf("assign of %T copies not every field:\n got %+v\nwant %+v", m, deref(spare), deref(ref))}
	}
	for i := 0; ; i++ {
		src, dst := copyMachine(m), copyMachine(other)
		dst.(assigner).assign(src)
		path, ok := changeAt(dst, i)
		if !ok {
			break
		}
		if !sameState(alg, reflect.ValueOf(src), reflect.ValueOf(ref)) {
			problems = append(problems, fmt.Sprintf("assign of %T shares memory: changing %s in the copy changes the source", m, path))
		}
		src, dst = copyMachine(m), copyMachine(other)
		dst.(assigner).assign(src)
		changeAt(src, i)
		if !sameState(alg, reflect.ValueOf(dst), reflect.ValueOf(ref)) {
			problems = append(problems, fmt.Sprintf("assign of %T shares memory: changing %s in the source changes the copy", m, path))
		}
	}
	return problems
}

// isWrapper reports whether m is a variant's wrapper: a struct that only
// embeds a machine.
func isWrapper(m machine) bool {
	v := reflect.ValueOf(m).Elem()
	return v.NumField() == 1 && v.Type().Field(0).Anonymous
}

func deref(m machine) any { return reflect.ValueOf(m).Elem() }

// copyMachine returns a deep copy of m made by reflection, independent of
// the clone under test.
func copyMachine(m machine) machine {
	return deepCopy(reflect.ValueOf(m)).Interface().(machine)
}

// writable returns v, which must be addressable, with the right to set it
// even when it is an unexported field.
func writable(v reflect.Value) reflect.Value {
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

// deepCopy returns a copy of v that shares no memory with it; v must be
// addressable unless it is a pointer.
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		c := reflect.New(v.Type()).Elem()
		if !v.IsNil() {
			p := reflect.New(v.Type().Elem())
			p.Elem().Set(deepCopy(v.Elem()))
			c.Set(p)
		}
		return c
	case reflect.Slice:
		c := reflect.New(v.Type()).Elem()
		if !v.IsNil() {
			s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
			for i := range v.Len() {
				s.Index(i).Set(deepCopy(v.Index(i)))
			}
			c.Set(s)
		}
		return c
	case reflect.Struct:
		c := reflect.New(v.Type()).Elem()
		for i := range v.NumField() {
			writable(c.Field(i)).Set(deepCopy(v.Field(i)))
		}
		return c
	case reflect.Interface:
		c := reflect.New(v.Type()).Elem()
		if !v.IsNil() {
			c.Set(deepCopy(writable(v).Elem()))
		}
		return c
	}
	c := reflect.New(v.Type()).Elem()
	c.Set(writable(v))
	return c
}

// sameState reports whether a and b hold the same state: nil and empty
// slices are the same, pointers are compared by what they point to, and
// alg's scratch fields are left out.
func sameState(alg Algorithm, a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return sameState(alg, a.Elem(), b.Elem())
	case reflect.Slice:
		if a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !sameState(alg, a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Struct:
		for i := range a.NumField() {
			if _, ok := scratchFields[alg][a.Type().Field(i).Name]; ok {
				continue
			}
			if !sameState(alg, a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return a.Uint() == b.Uint()
	}
	panic(fmt.Sprintf("sameState: %v", a.Kind()))
}

// change makes the k-th change of the leaves under v (see the top of the
// file), counting k down, and returns its path; it reports false when v
// has fewer changes than that. An embedded field's name is left out of
// the path.
func change(v reflect.Value, path string, k *int) (string, bool) {
	leaf := func(apply func()) (string, bool) {
		if *k == 0 {
			apply()
			return path, true
		}
		*k--
		return "", false
	}
	switch v.Kind() {
	case reflect.Bool:
		return leaf(func() { writable(v).SetBool(!v.Bool()) })
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return leaf(func() { writable(v).SetInt(v.Int() + 1) })
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return leaf(func() { writable(v).SetUint(v.Uint() + 1) })
	case reflect.Pointer:
		if v.IsNil() {
			return leaf(func() { writable(v).Set(reflect.New(v.Type().Elem())) })
		}
		if p, ok := change(v.Elem(), path, k); ok {
			return p, true
		}
		return leaf(func() { writable(v).Set(reflect.Zero(v.Type())) })
	case reflect.Slice:
		for i := range v.Len() {
			if p, ok := change(v.Index(i), fmt.Sprintf("%s[%d]", path, i), k); ok {
				return p, true
			}
		}
		return leaf(func() { w := writable(v); w.Set(reflect.Append(w, reflect.Zero(v.Type().Elem()))) })
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			p := path
			if !f.Anonymous {
				if p != "" {
					p += "."
				}
				p += f.Name
			}
			if p, ok := change(v.Field(i), p, k); ok {
				return p, true
			}
		}
	}
	return "", false
}

// typeCheckPackage parses and type-checks the package's non-test files.
func typeCheckPackage(t *testing.T) (*token.FileSet, []*ast.File, *types.Info, *types.Package) {
	t.Helper()
	tc := typeChecked()
	require.NoError(t, tc.err)
	return tc.fset, tc.files, tc.info, tc.pkg
}

// typeChecked type-checks the package once per test binary: the default
// importer runs the go command for the export data of every import,
// seconds of the tests' time, and the tests only read the result.
var typeChecked = sync.OnceValue(func() (tc struct {
	fset  *token.FileSet
	files []*ast.File
	info  *types.Info
	pkg   *types.Package
	err   error
}) {
	tc.fset = token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		tc.err = err
		return tc
	}
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		// Only the files this GOOS builds: bigarray_linux.go and
		// bigarray_other.go declare the same functions.
		if ok, err := build.Default.MatchFile(".", path); err != nil || !ok {
			if err != nil {
				tc.err = err
				return tc
			}
			continue
		}
		f, err := parser.ParseFile(tc.fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			tc.err = err
			return tc
		}
		tc.files = append(tc.files, f)
	}
	tc.info = &types.Info{Selections: make(map[*ast.SelectorExpr]*types.Selection), Types: make(map[ast.Expr]types.TypeAndValue)}
	tc.pkg, tc.err = (&types.Config{Importer: importer.Default()}).Check("dmutex", tc.fset, tc.files, tc.info)
	return tc
})

// optionalInterfaces are the interfaces of the machine contract that a
// machine may implement (machine.go), needer included.
var optionalInterfaces = []string{
	"describer", "assigner", "clockMachine", "tokenHolder", "regenerator",
	"fencer", "timestamped", "coordinated", "idleChecker", "needer",
}

// TestMachinesImplementWholeInterfaces fails when a machine type has some
// of an optional interface's methods but not all: the World and the Peer
// find an optional interface by a type assertion, so a machine that
// misses one method (as a token machine without carriesToken would) is
// silently not treated as one. It also fails when a type assertion on a
// machine names an interface optionalInterfaces does not list.
func TestMachinesImplementWholeInterfaces(t *testing.T) {
	_, files, info, pkg := typeCheckPackage(t)
	scope := pkg.Scope()
	iface := func(name string) *types.Interface {
		obj := scope.Lookup(name)
		require.NotNil(t, obj, "no interface %s", name)
		return obj.Type().Underlying().(*types.Interface)
	}
	machineIface := iface("machine")
	machines := 0
	for _, name := range scope.Names() {
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok || types.IsInterface(tn.Type()) {
			continue
		}
		ptr := types.NewPointer(tn.Type())
		if !types.Implements(ptr, machineIface) {
			continue
		}
		machines++
		mset := types.NewMethodSet(ptr)
		for _, in := range optionalInterfaces {
			it := iface(in)
			var have, miss []string
			for i := range it.NumMethods() {
				m := it.Method(i)
				if mset.Lookup(pkg, m.Name()) != nil {
					have = append(have, m.Name())
				} else {
					miss = append(miss, m.Name())
				}
			}
			assert.False(t, len(have) > 0 && len(miss) > 0, "%s has %v of %s but not %v: it is silently not a %s", name, have, in, miss, in)
		}
	}
	assert.GreaterOrEqual(t, machines, len(Algorithms()), "found fewer machine types than algorithms")

	// Every type assertion of a machine to an interface of the package's
	// own, in the files that drive machines, names a listed one (or
	// machine). Assertions of other values, such as a transport's
	// (floorClaimer), are not the machine contract's.
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			ta, ok := n.(*ast.TypeAssertExpr)
			if !ok || ta.Type == nil {
				return true
			}
			if x := info.Types[ta.X].Type; x == nil || !types.Implements(x, machineIface) {
				return true
			}
			id, ok := ta.Type.(*ast.Ident)
			if !ok || id.Name == "machine" {
				return true
			}
			if tn, ok := scope.Lookup(id.Name).(*types.TypeName); ok && types.IsInterface(tn.Type()) && !token.IsExported(id.Name) {
				assert.Contains(t, optionalInterfaces, id.Name, "a type assertion to %s: add it to the machine contract (machine.go) and to optionalInterfaces", id.Name)
			}
			return true
		})
	}
}
