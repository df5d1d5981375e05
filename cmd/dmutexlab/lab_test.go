package main

import (
	"fmt"
	"testing"

	"github.com/dmutex/dmutex"
	"github.com/stretchr/testify/assert"
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
