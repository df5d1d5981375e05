//go:build !unix

package dmutex

import "time"

// cpuTime is 0 where the system has no getrusage: the tests that measure
// CPU then measure nothing, and bound nothing.
func cpuTime() time.Duration { return 0 }
