package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/dmutex/dmutex"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlain: the page's violation texts keep what happened and drop the
// World's step numbers, which count differently from the page's.
func TestPlain(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: step 7: peer 0 entered while peer 1 was inside", dmutex.ErrViolation), "peer 0 entered while peer 1 was inside"},
		{fmt.Errorf("%w: deadlock after step 4: peers [0 1 2] wait and no message is in flight", dmutex.ErrViolation),
			"deadlock: peers [0 1 2] wait and no message is in flight"},
		{fmt.Errorf("%w: after step 3: peers [0 1] wait forever (messages lost: 2, peers crashed: [2])", dmutex.ErrBlocked),
			"peers [0 1] wait forever (messages lost: 2, peers crashed: [2])"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, plain(tt.err))
	}
}

// TestTheoryOneAtATime: the closed form the page shows beside the counts
// is what a run gives with one peer asking at a time (peers other than
// the coordinator or the token's first holder, P0, where the form says
// so), by kind and in all.
func TestTheoryOneAtATime(t *testing.T) {
	for _, alg := range []dmutex.Algorithm{dmutex.Centralized, dmutex.Lamport, dmutex.RicartAgrawala, dmutex.SuzukiKasami} {
		for _, n := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("%v/n=%d", alg, n), func(t *testing.T) {
				var choices []string
				for p := 1; p < n; p++ {
					choices = append(choices, fmt.Sprintf("r%d", p), "a1000")
				}
				st := &state{Alg: alg, N: n, Choices: choices}
				r, err := replay(st)
				require.NoError(t, err)
				require.Nil(t, r.violation)
				v := r.view()
				require.True(t, v.Done)
				entries := int(v.Counts.Entries)
				require.Equal(t, n-1, entries)
				assert.Equal(t, perEntry(t, v.Counts.Theory), int(v.Counts.Messages)/entries, "all: %s", v.Counts.Theory)
				assert.Zero(t, int(v.Counts.Messages)%entries)
				for _, k := range v.Counts.Kinds {
					assert.Equal(t, perEntry(t, k.Theory)*entries, int(k.Sent), "%s: %s", k.Kind, k.Theory)
				}
			})
		}
	}
}

// perEntry reads the number a closed form ends with, as in "2(N-1) = 4"
// or "1", before any remark in parentheses.
func perEntry(t *testing.T, form string) int {
	t.Helper()
	form, _, _ = strings.Cut(form, " (")
	if _, after, ok := strings.Cut(form, "= "); ok {
		form = after
	}
	k, err := strconv.Atoi(strings.TrimSpace(form))
	require.NoError(t, err, "closed form %q", form)
	return k
}

// TestStateQueryRoundTrip: query is the inverse of parseState, the
// detector's keys and a variant's defaults included.
func TestStateQueryRoundTrip(t *testing.T) {
	tests := []struct {
		raw  string
		want state
	}{
		{"alg=ricart-agrawala&n=3&recovery=1&detector=imperfect&false=2&c=r0.s1-0.u1-0",
			state{Alg: dmutex.RicartAgrawala, N: 3, Recovery: true, Detector: dmutex.DetectorImperfect, False: 2, Choices: []string{"r0", "s1-0", "u1-0"}}},
		{"alg=centralized&n=3&detector=imperfect",
			state{Alg: dmutex.Centralized, N: 3, Detector: dmutex.DetectorImperfect, False: 1}},
		{"variant=ricart-agrawala-naive-exclusion",
			state{Alg: dmutex.RicartAgrawala, N: 3, Variant: "ricart-agrawala-naive-exclusion", Detector: dmutex.DetectorPerfect}},
		{"variant=suzuki-kasami-naive-regeneration&detector=imperfect&false=0",
			state{Alg: dmutex.SuzukiKasami, N: 3, Variant: "suzuki-kasami-naive-regeneration", Recovery: true, Detector: dmutex.DetectorImperfect}},
	}
	for _, tt := range tests {
		q, err := urlParse(tt.raw)
		require.NoError(t, err, tt.raw)
		st, err := parseState(q)
		require.NoError(t, err, tt.raw)
		assert.Equal(t, tt.want, *st, tt.raw)
		q, err = urlParse(st.query())
		require.NoError(t, err)
		again, err := parseState(q)
		require.NoError(t, err, st.query())
		assert.Equal(t, st, again, st.query())
	}
}
