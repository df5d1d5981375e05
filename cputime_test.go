//go:build unix

package dmutex

import (
	"syscall"
	"time"
)

// cpuTime returns the user and system CPU time the process has used
// (cputime_other_test.go: 0 where getrusage is missing).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
