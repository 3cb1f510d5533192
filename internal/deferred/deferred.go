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

// Reporter reports one decision of n events for key, D its decision type.
type Reporter[D any] interface {
	ReportDeferred(key string, n int, d D)
}

// Slot holds how a limiter reports one decision, D its decision type: its
// reporter and the key. The zero value holds nothing. A Slot is used by
// one goroutine at a time.
type Slot[D any] struct {
	r   Reporter[D]
	key string
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

// Hold keeps r and k as the way to report, in place of what was held.
func (s *Slot[D]) Hold(r Reporter[D], k string) { s.r, s.key = r, k }

// Held reports whether a limiter left a report in s.
func (s *Slot[D]) Held() bool { return s.r != nil }

// Report reports n events decided as d through what was held, if
// anything, and empties s.
func (s *Slot[D]) Report(n int, d D) {
	if r := s.r; r != nil {
		s.r = nil
		r.ReportDeferred(s.key, n, d)
	}
}
