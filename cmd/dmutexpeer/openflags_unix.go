//go:build unix

package main

import "syscall"

// stateOpenFlags make opening a state file safe against what a shared
// directory may hold instead of one: O_NOFOLLOW refuses a symbolic link
// (to /dev/zero, say), and O_NONBLOCK keeps the open of a named pipe
// from waiting for a writer. readState then checks that what it opened is
// a regular file.
const stateOpenFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK
