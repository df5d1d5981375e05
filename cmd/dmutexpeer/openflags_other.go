//go:build !unix

package main

// stateOpenFlags: without O_NOFOLLOW and O_NONBLOCK, readState relies on
// its Lstat before the open and its Stat after it.
const stateOpenFlags = 0
