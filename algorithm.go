package dmutex

import (
	"fmt"
	"strings"
)

// An Algorithm names one of the mutual exclusion protocols. Its String form
// (such as "ricart-agrawala") is what ParseAlgorithm accepts.
type Algorithm int

// The algorithms, in the order of the comparison table in the package
// documentation.
const (
	Centralized Algorithm = iota
	TokenRing
	Lamport
	RicartAgrawala
	Maekawa
	SuzukiKasami
	Raymond
	RoucairolCarvalho
	NaimiTrehel
	LodhaKshemkalyani
	RicartAgrawalaToken
	AgrawalElAbbadi
	SinghalDynamic
	SinghalHeuristic
	numAlgorithms
)

// An algorithmSpec is what the rest of the package knows of an algorithm.
// Adding an algorithm is a new file with its machine and one row here.
type algorithmSpec struct {
	name string

	// fifo is set for algorithms that are only correct over per-pair FIFO
	// channels; the simulator refuses to reorder their messages.
	fifo bool

	// build makes peer id's machine for a cluster of n.
	build func(id, n int, cfg *config) (machine, error)
}

var algorithms = [numAlgorithms]algorithmSpec{
	Centralized:         {name: "centralized", build: newCentralized},
	TokenRing:           {name: "token-ring", build: newTokenRing},
	Lamport:             {name: "lamport", fifo: true, build: newLamport},
	RicartAgrawala:      {name: "ricart-agrawala", build: newRicart},
	Maekawa:             {name: "maekawa", fifo: true, build: newMaekawa},
	SuzukiKasami:        {name: "suzuki-kasami", build: newSuzukiKasami},
	Raymond:             {name: "raymond", build: newRaymond},
	RoucairolCarvalho:   {name: "roucairol-carvalho", build: newRoucairol},
	NaimiTrehel:         {name: "naimi-trehel", build: newNaimiTrehel},
	LodhaKshemkalyani:   {name: "lodha-kshemkalyani", fifo: true, build: newLodha},
	RicartAgrawalaToken: {name: "ricart-agrawala-token", build: newRicartToken},
	AgrawalElAbbadi:     {name: "agrawal-el-abbadi", fifo: true, build: newAgrawalElAbbadi},
	SinghalDynamic:      {name: "singhal-dynamic", build: newSinghalDynamic},
	SinghalHeuristic:    {name: "singhal-heuristic", build: newSinghal},
}

// Algorithms returns every algorithm, in the order of the constants.
func Algorithms() []Algorithm {
	all := make([]Algorithm, numAlgorithms)
	for i := range all {
		all[i] = Algorithm(i)
	}
	return all
}

// String returns the algorithm's name, such as "suzuki-kasami".
func (a Algorithm) String() string {
	if a.valid() {
		return algorithms[a].name
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// NeedsFIFO reports whether the algorithm is correct only over channels
// that deliver the messages from one peer to another in the order sent.
func (a Algorithm) NeedsFIFO() bool { return a.valid() && algorithms[a].fifo }

func (a Algorithm) valid() bool { return a >= 0 && a < numAlgorithms }

// ParseAlgorithm returns the algorithm whose String form is s, ignoring
// case; "ricart", "ra", "sk" and "ring" are accepted as short forms. For
// any other s it returns an error wrapping [ErrInvalidConfig] and
// Algorithm(-1), which is no algorithm: every constructor refuses it, so
// a caller that drops the error cannot start Centralized by mistake.
func ParseAlgorithm(s string) (Algorithm, error) {
	key := strings.ToLower(strings.TrimSpace(s))
	switch key {
	case "ra", "ricart":
		return RicartAgrawala, nil
	case "sk":
		return SuzukiKasami, nil
	case "ring":
		return TokenRing, nil
	}
	for a := range numAlgorithms {
		if algorithms[a].name == key {
			return a, nil
		}
	}
	names := make([]string, numAlgorithms)
	for a := range numAlgorithms {
		names[a] = algorithms[a].name
	}
	return Algorithm(-1), fmt.Errorf("%w: unknown algorithm %q (want one of %s)",
		ErrInvalidConfig, s, strings.Join(names, ", "))
}
