package ratelimit

import (
	"testing"
	"time"
)

// BenchmarkPenaltyBoxAllow is Allow through a PenaltyBox on a key that is
// allowed, against BenchmarkPenaltyBoxBareAllow, the same bucket alone.
func BenchmarkPenaltyBoxAllow(b *testing.B) {
	tb, _ := NewTokenBucket(PerSecond(1e9), 1e9)
	box, _ := NewPenaltyBox(tb, 5, time.Minute, time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		box.Allow("k")
	}
}

func BenchmarkPenaltyBoxBareAllow(b *testing.B) {
	tb, _ := NewTokenBucket(PerSecond(1e9), 1e9)
	b.ReportAllocs()
	for b.Loop() {
		tb.Allow("k")
	}
}
