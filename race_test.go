//go:build race

package ratelimit

// raceEnabled reports whether the tests run under the race detector, which
// slows them several times over: the long runs then take fewer events.
const raceEnabled = true
