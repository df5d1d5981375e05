package dmutex

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// Several tests explore the same configuration: TestCheckVariants and
// TestSafetyOnlyCounterexamples each variant to its first violation,
// TestModelCheck and TestPartialOrderKeepsVerdicts the small FIFO cases.
// sharedCheck explores each configuration once per test binary and hands
// the others its result, so that go test -race ./... pays for one search.

// checkCache holds the result of each configuration explored so far.
var checkCache struct {
	sync.Mutex
	m map[string]*cachedCheck
}

type cachedCheck struct {
	once sync.Once
	res  CheckResult
	err  error
}

// cacheableOptions are the options whose name says all they do; a
// configuration with any other option (voting sets, a tree) is explored
// afresh each time.
var cacheableOptions = map[string]bool{"WithImplicitReplies": true, "WithRecovery": true}

// checkKey returns the key of cfg in the cache, or "" for a configuration
// that cannot be told apart by its fields (a machine built by the test, a
// progress callback, an option with arguments).
func checkKey(cfg CheckConfig) string {
	if cfg.build != nil || cfg.Progress != nil {
		return ""
	}
	var opts []string
	for _, o := range cfg.Options {
		if !cacheableOptions[o.String()] {
			return ""
		}
		opts = append(opts, o.String())
	}
	cfg.Options = nil
	return fmt.Sprintf("%+v %v", cfg, opts)
}

// sharedCheck is mustCheck, run once per configuration: a second call
// with the same configuration gets the first one's result (the same
// Violation too, which callers must only read).
func sharedCheck(t testing.TB, cfg CheckConfig) CheckResult {
	t.Helper()
	key := checkKey(cfg)
	if key == "" {
		return mustCheck(t, cfg)
	}
	checkCache.Lock()
	if checkCache.m == nil {
		checkCache.m = map[string]*cachedCheck{}
	}
	c := checkCache.m[key]
	if c == nil {
		c = &cachedCheck{}
		checkCache.m[key] = c
	}
	checkCache.Unlock()
	c.once.Do(func() { c.res, c.err = Check(context.Background(), cfg) })
	if c.err != nil {
		t.Fatalf("Check(%s): %v", key, c.err)
	}
	return c.res
}
