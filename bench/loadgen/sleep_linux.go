//go:build linux

package main

import (
	"runtime"
	"syscall"
	"time"
)

// prSetTimerSlack is prctl(2)'s PR_SET_TIMERSLACK.
const prSetTimerSlack = 29

// preparePacer binds the calling goroutine to its OS thread and asks the kernel for 1 µs timer slack
// (the default is 50 µs): the pacer then sleeps with nanosleep(2) on that thread. time.Sleep is not used
// because the Go runtime rounds sub-millisecond waits in its network poller up to 1 ms, which would make
// the client, not the server, late by up to a millisecond.
func preparePacer() {
	runtime.LockOSThread()
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
}

// sleepUntil returns at (or just after) deadline.
func sleepUntil(deadline time.Time) {
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(wait))
		if err := syscall.Nanosleep(&ts, nil); err != nil && err != syscall.EINTR {
			time.Sleep(wait)
		}
	}
}
