//go:build !linux

package main

import "time"

// preparePacer does nothing off Linux.
func preparePacer() {}

// sleepUntil returns at (or after) deadline; off Linux with the runtime's timer (coarser below 1 ms).
func sleepUntil(deadline time.Time) {
	if wait := time.Until(deadline); wait > 0 {
		time.Sleep(wait)
	}
}
