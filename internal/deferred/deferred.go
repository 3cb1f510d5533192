// Package deferred lets a caller that makes several calls on one limiter
// for one decision (internal/charge: peeks, a booking given back, the
// booking kept) report that decision once, itself, instead of each call
// reporting on its own.
//
// The caller puts a Slot in the context it passes to the limiter; a
// limiter that honours it reports nothing on those calls and leaves in
// the Slot how it would report (Hold). The caller then reports the final
// outcome once, with Report; or drops it by never calling Report.
package deferred

import "context"

// Slot holds how a limiter reports one decision of n events, D its
// decision type. The zero value holds nothing. A Slot is used by one
// goroutine at a time.
type Slot[D any] struct {
	report func(n int, d D)
}

type key[D any] struct{}

// With returns ctx carrying s.
func With[D any](ctx context.Context, s *Slot[D]) context.Context {
	return context.WithValue(ctx, key[D]{}, s)
}

// From returns the Slot ctx carries, or nil.
func From[D any](ctx context.Context) *Slot[D] {
	s, _ := ctx.Value(key[D]{}).(*Slot[D])
	return s
}

// Hold keeps f as the way to report, in place of what was held.
func (s *Slot[D]) Hold(f func(n int, d D)) { s.report = f }

// Held reports whether a limiter left a report in s.
func (s *Slot[D]) Held() bool { return s.report != nil }

// Report reports n events decided as d through what was held, if
// anything, and empties s.
func (s *Slot[D]) Report(n int, d D) {
	if f := s.report; f != nil {
		s.report = nil
		f(n, d)
	}
}
