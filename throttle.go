package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// ErrThrottled is returned (or matched, with errors.Is) when a
// ClientThrottle refuses a call locally, without sending it, because the
// backend has been refusing too many of the recent calls. Its text will not
// change.
var ErrThrottled = errors.New("ratelimit: throttled locally: the backend refuses too many calls")

// throttleBuckets is the number of sub-windows a ClientThrottle's window is
// divided into: the history it counts is the current sub-window plus the
// throttleBuckets-1 before it.
const throttleBuckets = 10

// A ClientThrottle is the client-side adaptive throttling of Google's SRE
// book (chapter "Handling Overload"): a client that sees its backend refuse
// calls rejects a share of its own calls locally, before they cost the
// backend anything, and lifts the rejection as the backend recovers.
//
// Over a sliding window it counts requests (every call the application
// attempted, including those rejected locally) and accepts (calls the
// backend accepted, reported through Record). Allow rejects a call with
// probability
//
//	p = max(0, (requests − K·accepts) / (requests + 1))
//
// evaluated on the counts before the call, which then counts as a request.
// The window is divided into 10 equal sub-windows; the counts are those of
// the current sub-window and the nine before it, so they cover between 9/10
// of the window and the whole window of history.
//
// While every sent call is accepted p is 0 for any K ≥ 1. With K = 2 a
// backend that accepts half the calls it gets is the neutral point: any
// sent fraction is stable. A backend that accepts fewer drives p towards 1
// (but p < 1 always: one call in requests+1 still probes the backend); one
// that accepts more drives p to 0.
//
// Build it with NewClientThrottle; the zero value is not usable. It is safe
// for concurrent use. Most callers want Allow before a call and Record
// after it; httplimit.Transport and grpclimit's client interceptor do both.
type ClientThrottle struct {
	k      float64
	width  int64 // sub-window width, ns
	clock  nanoClock
	random func() float64

	mu      sync.Mutex
	last    int64 // latest instant seen; time never runs backwards here
	buckets [throttleBuckets]throttleBucket
}

type throttleBucket struct {
	epoch    int64 // sub-window index: instant / width
	requests int64
	accepts  int64
}

// A ThrottleOption configures a ClientThrottle.
type ThrottleOption func(*throttleConfig)

type throttleConfig struct {
	clock  Clock          // default: SystemClock()
	random func() float64 // default: math/rand/v2 Float64
}

// WithThrottleClock makes the throttle read time from c instead of the
// system clock.
func WithThrottleClock(c Clock) ThrottleOption {
	return func(cfg *throttleConfig) { cfg.clock = c }
}

// WithThrottleRand makes the throttle draw its random numbers, uniform in
// [0, 1), from r instead of math/rand/v2. r is called without any lock of
// the throttle held, so it may be slow; it must be safe for concurrent use
// if the throttle is used concurrently.
func WithThrottleRand(r func() float64) ThrottleOption {
	return func(cfg *throttleConfig) { cfg.random = r }
}

// NewClientThrottle returns a ClientThrottle with multiplier k (the SRE
// book suggests 2; smaller is more aggressive) over a sliding window of the
// given length. k must be finite and at least 1 (below 1 it would reject
// calls of a backend that accepts them all); window must be a positive
// multiple of 10 nanoseconds.
func NewClientThrottle(k float64, window time.Duration, opts ...ThrottleOption) (*ClientThrottle, error) {
	cfg := throttleConfig{clock: SystemClock(), random: rand.Float64}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case math.IsNaN(k) || math.IsInf(k, 0) || k < 1:
		return nil, fmt.Errorf("%w: throttle multiplier K must be finite and at least 1, got %v", ErrInvalidOption, k)
	case window <= 0 || window%throttleBuckets != 0:
		return nil, fmt.Errorf("%w: throttle window must be a positive multiple of %dns, got %s", ErrInvalidOption, throttleBuckets, window)
	case cfg.clock == nil:
		return nil, fmt.Errorf("%w: nil clock", ErrInvalidOption)
	case cfg.random == nil:
		return nil, fmt.Errorf("%w: nil random source", ErrInvalidOption)
	}
	t := &ClientThrottle{k: k, width: int64(window) / throttleBuckets, clock: newNanoClock(cfg.clock), random: cfg.random}
	t.last = math.MinInt64
	for i := range t.buckets {
		t.buckets[i].epoch = math.MinInt64
	}
	return t, nil
}

// Allow reports whether a call should be sent now. It is shorthand for
// AllowAt(clock.Now()).
func (t *ClientThrottle) Allow() bool { return t.allowNs(t.clock.now()) }

// AllowAt reports whether a call attempted at instant at should be sent,
// and counts it as a request either way. A false result means the caller
// should fail the call locally (with ErrThrottled) and not send it.
func (t *ClientThrottle) AllowAt(at time.Time) bool { return t.allowNs(t.clock.nanosOf(at)) }

func (t *ClientThrottle) allowNs(now int64) bool {
	t.mu.Lock()
	now = t.advanceLocked(now)
	req, acc := t.countsLocked(now)
	b := t.bucketLocked(now)
	b.requests++
	t.mu.Unlock()
	p := t.probability(req, acc)
	if p <= 0 {
		return true
	}
	return t.random() >= p
}

// Record reports the outcome of a call Allow let through: accepted is
// whether the backend accepted it. It is shorthand for
// RecordAt(clock.Now(), accepted).
func (t *ClientThrottle) Record(accepted bool) { t.recordNs(t.clock.now(), accepted) }

// RecordAt reports, at instant at, the outcome of a call Allow let through.
// Only accepts change the throttle's counts; a refusal is already counted
// as the request that Allow counted.
func (t *ClientThrottle) RecordAt(at time.Time, accepted bool) {
	t.recordNs(t.clock.nanosOf(at), accepted)
}

func (t *ClientThrottle) recordNs(now int64, accepted bool) {
	if !accepted {
		return
	}
	t.mu.Lock()
	now = t.advanceLocked(now)
	t.bucketLocked(now).accepts++
	t.mu.Unlock()
}

// RejectProbability returns the probability with which a call attempted
// now would be rejected locally, without counting it.
func (t *ClientThrottle) RejectProbability() float64 {
	return t.rejectProbabilityNs(t.clock.now())
}

// RejectProbabilityAt is RejectProbability at instant at.
func (t *ClientThrottle) RejectProbabilityAt(at time.Time) float64 {
	return t.rejectProbabilityNs(t.clock.nanosOf(at))
}

func (t *ClientThrottle) rejectProbabilityNs(now int64) float64 {
	t.mu.Lock()
	now = t.advanceLocked(now)
	req, acc := t.countsLocked(now)
	t.mu.Unlock()
	return t.probability(req, acc)
}

// probability is the SRE formula on counts req and acc.
func (t *ClientThrottle) probability(req, acc int64) float64 {
	p := (float64(req) - t.k*float64(acc)) / (float64(req) + 1)
	if p < 0 {
		return 0
	}
	return p
}

// advanceLocked returns now, or the latest instant seen if now is earlier,
// so that a clock stepped backwards neither loses nor revives counts.
// Requires t.mu held.
func (t *ClientThrottle) advanceLocked(now int64) int64 {
	if now < t.last {
		return t.last
	}
	t.last = now
	return now
}

// epochOf returns the sub-window index of instant ns (floor division).
func (t *ClientThrottle) epochOf(ns int64) int64 {
	e := ns / t.width
	if ns%t.width < 0 {
		e--
	}
	return e
}

// bucketLocked returns the bucket of now's sub-window, reset if it held an
// older sub-window. Requires t.mu held.
func (t *ClientThrottle) bucketLocked(now int64) *throttleBucket {
	e := t.epochOf(now)
	i := e % throttleBuckets
	if i < 0 {
		i += throttleBuckets
	}
	b := &t.buckets[i]
	if b.epoch != e {
		*b = throttleBucket{epoch: e}
	}
	return b
}

// countsLocked sums the buckets of now's sub-window and the nine before it.
// Requires t.mu held.
func (t *ClientThrottle) countsLocked(now int64) (req, acc int64) {
	e := t.epochOf(now)
	for i := range t.buckets {
		b := &t.buckets[i]
		if b.epoch <= e && b.epoch > e-throttleBuckets {
			req += b.requests
			acc += b.accepts
		}
	}
	return req, acc
}
