//go:build race

package main

// raceEnabled is set when the tests run under the race detector, which
// slows the model checker about tenfold.
const raceEnabled = true
