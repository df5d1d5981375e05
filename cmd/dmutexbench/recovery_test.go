package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecoveryTable runs dmutexbench -recovery at two detector delays and
// checks every figure it prints against what Ricart-Agrawala's crash
// exclusion costs (see TestMeasureRecoveryRicart in package dmutex): a
// holder's crash, Detect and no message in virtual time; a waiting peer's,
// the later of E+T and Detect, and the holder's 2(n-1) messages; at run
// time, one request at a time, the survivor's n-1 requests and the other
// survivors' n-2 replies, in at least the unreachable-after bound.
func TestRecoveryTable(t *testing.T) {
	for _, detect := range []float64{0.5, 5} {
		t.Run(fmt.Sprint(detect), func(t *testing.T) {
			code, out, errOut := runCmd(t, false, "-recovery", "-alg", "ricart-agrawala", "-n", "3,5",
				"-detect", fmt.Sprint(detect), "-unreachable-after", "5ms", "-format", "json")
			require.Equal(t, 0, code, errOut)
			var rows []recoveryRow
			require.NoError(t, json.Unmarshal([]byte(out), &rows))
			require.Len(t, rows, 4)
			for _, r := range rows {
				name := fmt.Sprintf("n=%d %s", r.N, r.Victim)
				assert.Equal(t, "ricart-agrawala", r.Algorithm)
				assert.Equal(t, detect, r.Detect, name)
				switch r.Victim {
				case "holder":
					assert.Equal(t, detect, r.Time, name)
					assert.Zero(t, r.Messages, name)
				case "waiting":
					assert.Equal(t, math.Max(timedCS+1, detect), r.Time, name)
					assert.Equal(t, uint64(2*(r.N-1)), r.Messages, name)
				default:
					t.Errorf("%s: unknown victim", name)
				}
				assert.Equal(t, uint64(2*r.N-3), r.RuntimeMsgs, name)
				assert.GreaterOrEqual(t, r.RuntimeMS, 5.0, "%s: the survivor entered before the crashed peer could be suspected", name)
				assert.Equal(t, "5ms", r.After)
			}
		})
	}
}

func TestRecoveryFlags(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-recovery", "-alg", "lamport"}, 1, "lamport has no crash recovery"},
		{[]string{"-recovery", "-n", "9"}, 1, "n = 9, want 2 to 8"},
		{[]string{"-recovery", "-timed"}, 2, "-timed and -recovery are exclusive"},
		{[]string{"-recovery", "-detect", "-1"}, 2, "-detect -1"},
		{[]string{"-recovery", "-chart", "x.png"}, 2, "-chart does not apply to -recovery"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errOut := runCmd(t, false, tt.args...)
			assert.Equal(t, tt.code, code)
			assert.Contains(t, errOut, tt.want)
		})
	}
	code, out, errOut := runCmd(t, false, "-recovery", "-n", "3", "-format", "markdown")
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasPrefix(out, "| algorithm | n | victim |"), out)
	assert.Contains(t, out, "| ricart-agrawala-implicit | 3 | holder | 2.00T | 2.00T | 0 |")
}
