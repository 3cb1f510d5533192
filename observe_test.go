package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// eventLog is an observer that keeps every event, for tests.
type eventLog struct {
	mu sync.Mutex
	ev []Event
}

func (l *eventLog) Observe(e Event) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *eventLog) take() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := l.ev
	l.ev = nil
	return ev
}

var obsT0 = time.Unix(1_700_000_000, 0)

// Invariant: an observer changes no decision. A limiter with one and a twin
// without, driven by the same random trace on their own manual clocks,
// answer alike; the observed one reports exactly one event per call that
// asked for events (n > 0), saying what the call returned.
func TestObserverChangesNoDecision(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(16, 1))
			ca, cb := NewManualClock(obsT0), NewManualClock(obsT0)
			log := &eventLog{}
			plain, err := alg.new(5, time.Second, ca)
			if err != nil {
				t.Fatal(err)
			}
			seen, err := alg.new(5, time.Second, cb, WithObserver(log), WithName("api"))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			keys := []string{"a", "b", ""}
			for i := range 3000 {
				key := keys[rng.IntN(len(keys))]
				if d := time.Duration(rng.IntN(400)) * time.Millisecond; rng.IntN(3) == 0 {
					ca.Advance(d)
					cb.Advance(d)
				}
				switch op := rng.IntN(3); op {
				case 0:
					a, b := plain.Allow(key), seen.Allow(key)
					if a != b {
						t.Fatalf("step %d: Allow(%q) = %v with an observer, %v without", i, key, b, a)
					}
					ev := log.take()
					if len(ev) != 1 || ev[0].Allowed != b || ev[0].Key != key || ev[0].N != 1 || ev[0].Limiter != "api" {
						t.Fatalf("step %d: Allow(%q) = %v reported %+v", i, key, b, ev)
					}
				case 1:
					n := rng.IntN(3)
					da, _ := plain.AllowN(ctx, key, n)
					db, _ := seen.AllowN(ctx, key, n)
					if da != db {
						t.Fatalf("step %d: AllowN(%q, %d) = %+v with an observer, %+v without", i, key, n, db, da)
					}
					ev := log.take()
					if n == 0 {
						if len(ev) != 0 {
							t.Fatalf("step %d: a peek reported %+v", i, ev)
						}
						continue
					}
					if len(ev) != 1 || ev[0].Allowed != db.Allowed || ev[0].Remaining != db.Remaining || ev[0].RetryAfter != db.RetryAfter || ev[0].N != n {
						t.Fatalf("step %d: AllowN(%q, %d) = %+v reported %+v", i, key, n, db, ev)
					}
				case 2:
					ra, _ := plain.Reserve(ctx, key, 1)
					rb, _ := seen.Reserve(ctx, key, 1)
					if ra.OK() != rb.OK() || ra.Decision() != rb.Decision() {
						t.Fatalf("step %d: Reserve(%q) differs with an observer", i, key)
					}
					ev := log.take()
					if len(ev) != 1 || ev[0].Allowed != rb.OK() || (rb.OK() && ev[0].Waited != rb.Decision().RetryAfter) {
						t.Fatalf("step %d: Reserve(%q) OK %v delay %v reported %+v", i, key, rb.OK(), rb.Delay(), ev)
					}
					if rng.IntN(2) == 0 {
						ra.Cancel()
						rb.Cancel()
					}
				}
			}
		})
	}
}

// A WaitN reports once, with how long it waited on the limiter's clock.
func TestObserverWaitReportsWaited(t *testing.T) {
	clk := NewManualClock(obsT0)
	log := &eventLog{}
	tb, err := NewTokenBucket(PerSecond(1), 1, WithClock(clk), WithObserver(log))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := tb.Wait(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- tb.Wait(ctx, "k") }()
	for clk.Timers() == 0 {
		time.Sleep(time.Millisecond) // waits for the goroutine to park, not for time to pass
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ev := log.take()
	if len(ev) != 2 || !ev[0].Allowed || ev[0].Waited != 0 || !ev[1].Allowed || ev[1].Waited != time.Second {
		t.Fatalf("events %+v, want two allowed, the second having waited 1s", ev)
	}
}

// Allow allocates nothing for an existing key, with no observer and with
// the ready Counter.
func TestObserverAllowDoesNotAllocate(t *testing.T) {
	for _, alg := range algorithms {
		for _, obs := range []Observer{nil, &Counter{}} {
			var opts []Option
			if obs != nil {
				opts = append(opts, WithObserver(obs), WithName("x"))
			}
			l, err := alg.new(1000, time.Second, NewManualClock(obsT0), opts...)
			if err != nil {
				t.Fatal(err)
			}
			l.Allow("k")
			if a := testing.AllocsPerRun(100, func() { l.Allow("k") }); a != 0 {
				t.Errorf("%s with observer %T: Allow allocates %v times", alg.name, obs, a)
			}
			sh, err := NewShadow(l, WithObserver(&Counter{}), WithName("s"))
			if err != nil {
				t.Fatal(err)
			}
			if a := testing.AllocsPerRun(100, func() { sh.Allow("k") }); a != 0 {
				t.Errorf("a shadow of %s: Allow allocates %v times", alg.name, a)
			}
		}
	}
}

// Invariant: the Counter's totals are exactly the decisions returned, per
// name, whatever the interleaving of goroutines.
func TestCounterCountsEveryDecision(t *testing.T) {
	var c Counter
	clk := NewManualClock(obsT0)
	a, _ := NewTokenBucket(PerSecond(100), 100, WithClock(clk), WithObserver(&c), WithName("a"))
	b, _ := NewFixedWindow(PerSecond(50), WithClock(clk), WithObserver(&c), WithName("b"))
	var mu sync.Mutex
	want := map[string]*Counts{"a": {}, "b": {}}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			local := map[string]*Counts{"a": {}, "b": {}}
			for range 500 {
				name, l := "a", Limiter(a)
				if rng.IntN(2) == 0 {
					name, l = "b", b
				}
				if l.Allow([]string{"x", "y", "z"}[rng.IntN(3)]) {
					local[name].Allowed++
				} else {
					local[name].Denied++
				}
			}
			mu.Lock()
			for n, v := range local {
				want[n].Allowed += v.Allowed
				want[n].Denied += v.Denied
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for n, w := range want {
		if got := c.Get(n); got != *w {
			t.Errorf("%s: counted %+v, returned %+v", n, got, *w)
		}
		if w.Denied == 0 {
			t.Errorf("%s: the trace denied nothing; the test proves little", n)
		}
	}
	if s := c.Snapshot(); len(s) != 2 || s["a"] != *want["a"] {
		t.Errorf("snapshot %+v", s)
	}
	if got := c.Get("never"); got != (Counts{}) {
		t.Errorf("an unseen name has %+v", got)
	}
}

// Invariant: the Space-Saving bounds hold against exact counts on a skewed
// seeded trace: each listed key's true count is in [Count-Error, Count],
// every key denied more than N/k times is listed, and the smallest count
// is at most N/k once k keys are held.
func TestTopKeysBound(t *testing.T) {
	for _, tc := range []struct {
		k, keys, n int
		s          float64
		seed       uint64
	}{
		{k: 10, keys: 10_000, n: 200_000, s: 1.2, seed: 1},
		{k: 50, keys: 100_000, n: 300_000, s: 1.05, seed: 2},
		{k: 2, keys: 100, n: 10_000, s: 3, seed: 3},
		{k: 200, keys: 150, n: 20_000, s: 1.1, seed: 4}, // more counters than keys: exact
	} {
		top, err := NewTopKeys(tc.k)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(tc.seed, 16))
		z := rand.NewZipf(rng, tc.s, 1, uint64(tc.keys-1))
		exact := make(map[string]int64)
		names := make([]string, tc.keys)
		for i := range names {
			names[i] = "client-" + string(rune('a'+i%26)) + itoa(i)
		}
		for range tc.n {
			key := names[z.Uint64()]
			exact[key]++
			top.Observe(Event{Key: key})
			if rng.IntN(4) == 0 {
				top.Observe(Event{Key: "allowed-only", Allowed: true}) // never counted
			}
		}
		if got := top.Denials(); got != int64(tc.n) {
			t.Fatalf("counted %d denials, want %d", got, tc.n)
		}
		list := top.Top()
		if len(list) > tc.k {
			t.Fatalf("%d keys listed, k = %d", len(list), tc.k)
		}
		listed := make(map[string]bool)
		for i, kc := range list {
			listed[kc.Key] = true
			if e := exact[kc.Key]; e > kc.Count || e < kc.Count-kc.Error {
				t.Errorf("k=%d: %s counted %d (error %d), true count %d", tc.k, kc.Key, kc.Count, kc.Error, e)
			}
			if i > 0 && list[i-1].Count < kc.Count {
				t.Errorf("not sorted at %d", i)
			}
			if kc.Key == "allowed-only" {
				t.Errorf("an allowed key was counted")
			}
		}
		bound := int64(tc.n / tc.k)
		heavy := 0
		for key, c := range exact {
			if c > bound {
				heavy++
				if !listed[key] {
					t.Errorf("k=%d: %s denied %d times > N/k = %d, not listed", tc.k, key, c, bound)
				}
			}
		}
		if len(list) == tc.k && list[len(list)-1].Count > bound {
			t.Errorf("k=%d: smallest count %d > N/k = %d", tc.k, list[len(list)-1].Count, bound)
		}
		if len(exact) <= tc.k {
			for _, kc := range list {
				if kc.Error != 0 || kc.Count != exact[kc.Key] {
					t.Errorf("k=%d over %d keys: %+v not exact (%d)", tc.k, len(exact), kc, exact[kc.Key])
				}
			}
		}
		if heavy == 0 {
			t.Errorf("k=%d: no key above N/k; the trace is not skewed enough to test the bound", tc.k)
		}
	}
	if _, err := NewTopKeys(0); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewTopKeys(0): %v", err)
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// Invariant: a shadow never denies, and consumes exactly what its limiter
// enforced alone would: on the same random trace, the shadow's events say
// what a twin enforced limiter answered, and the two limiters' states stay
// equal (their peeks agree).
func TestShadowDecidesAsEnforcedWouldAndNeverDenies(t *testing.T) {
	for _, alg := range algorithms {
		t.Run(alg.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(16, 3))
			ca, cb := NewManualClock(obsT0), NewManualClock(obsT0)
			enforced, _ := alg.new(4, time.Second, ca)
			inner, _ := alg.new(4, time.Second, cb)
			log := &eventLog{}
			sh, err := NewShadow(inner, WithObserver(log), WithName("trial"))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			denied := 0
			for i := range 3000 {
				key := []string{"a", "b"}[rng.IntN(2)]
				if rng.IntN(3) == 0 {
					d := time.Duration(rng.IntN(300)) * time.Millisecond
					ca.Advance(d)
					cb.Advance(d)
				}
				var want bool
				if rng.IntN(2) == 0 {
					want = enforced.Allow(key)
					if !sh.Allow(key) {
						t.Fatalf("step %d: the shadow denied", i)
					}
				} else {
					n := 1 + rng.IntN(2)
					de, _ := enforced.AllowN(ctx, key, n)
					want = de.Allowed
					ds, err := sh.AllowN(ctx, key, n)
					if err != nil || !ds.Allowed {
						t.Fatalf("step %d: the shadow's AllowN = %+v, %v", i, ds, err)
					}
				}
				ev := log.take()
				if len(ev) != 1 || !ev[0].Shadow || ev[0].Allowed != want || ev[0].Limiter != "trial" {
					t.Fatalf("step %d: enforced answered %v, the shadow reported %+v", i, want, ev)
				}
				if !want {
					denied++
				}
				pa, _ := enforced.AllowN(ctx, key, 0)
				pb, _ := inner.AllowN(ctx, key, 0)
				if pa != pb {
					t.Fatalf("step %d: the shadow's limiter holds %+v, the enforced one %+v", i, pb, pa)
				}
			}
			if denied == 0 {
				t.Fatal("the trace denied nothing")
			}
		})
	}
}

// A shadow's Reserve and WaitN book what enforcement would and never wait.
func TestShadowReserveAndWait(t *testing.T) {
	clk := NewManualClock(obsT0)
	tb, _ := NewTokenBucket(PerSecond(1), 1, WithClock(clk))
	log := &eventLog{}
	sh, _ := NewShadow(tb, WithObserver(log))
	ctx := context.Background()
	if err := sh.Wait(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := sh.Wait(ctx, "k"); err != nil { // enforced, this would wait 1s
		t.Fatal(err)
	}
	ev := log.take()
	if len(ev) != 2 || ev[1].Waited != time.Second || !ev[1].Allowed || !ev[1].Shadow {
		t.Fatalf("events %+v", ev)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if err := sh.WaitN(dctx, "k", 1); err != nil { // would pass the deadline
		t.Fatal(err)
	}
	if ev := log.take(); len(ev) != 1 || ev[0].Allowed {
		t.Fatalf("a wait past the deadline reported %+v, want a would-deny", ev)
	}
	r, err := sh.Reserve(ctx, "k", 1)
	if err != nil || !r.OK() || r.Delay() != 0 {
		t.Fatalf("shadow Reserve: %v, %v, %v", r.OK(), r.Delay(), err)
	}
	if ev := log.take(); len(ev) != 1 || ev[0].Waited != 2*time.Second {
		t.Fatalf("Reserve reported %+v, want a booking 2s ahead", ev)
	}
	r.Cancel() // the latest booking comes back whole
	if d, _ := tb.AllowN(ctx, "k", 0); d.ResetAfter != 2*time.Second {
		t.Fatalf("after Cancel the bucket resets in %v, want 2s", d.ResetAfter)
	}
	if _, err := sh.AllowN(ctx, "k", 2); err != nil { // more than the capacity: a would-deny, not an error
		t.Fatal(err)
	}
	if ev := log.take(); len(ev) != 1 || ev[0].Allowed {
		t.Fatalf("n over the capacity reported %+v", ev)
	}
	if _, err := sh.AllowN(ctx, "k", -1); !errors.Is(err, ErrNegativeN) {
		t.Fatalf("n < 0: %v", err)
	}
}

func TestNewShadowRefusesWhatItCannotHonour(t *testing.T) {
	if _, err := NewShadow(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil limiter: %v", err)
	}
	tb, _ := NewTokenBucket(PerSecond(1), 1)
	if _, err := NewShadow(tb, WithClock(NewManualClock(obsT0))); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithClock on a shadow: %v", err)
	}
}

// A shadow part of a Multi never denies it, and books only when the
// enforced parts allowed: a request the enforced part denies costs the
// shadow nothing, as it would have cost an enforced part nothing.
func TestShadowInMulti(t *testing.T) {
	clk := NewManualClock(obsT0)
	var c Counter
	enforced, _ := NewTokenBucket(PerSecond(1), 2, WithClock(clk), WithObserver(&c), WithName("ip"))
	inner, _ := NewTokenBucket(PerSecond(1), 1, WithClock(clk))
	sh, _ := NewShadow(inner, WithObserver(&c), WithName("new"))
	m, err := NewMulti(MultiLimit{Limiter: enforced}, MultiLimit{Limiter: sh, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	got := []bool{m.Allow("x"), m.Allow("x"), m.Allow("x")}
	if !got[0] || !got[1] || got[2] {
		t.Fatalf("Multi answered %v, want the enforced part's true, true, false", got)
	}
	if g := c.Get("ip"); g != (Counts{Allowed: 2, Denied: 1}) {
		t.Errorf("ip: %+v", g)
	}
	if g := c.Get("new"); g != (Counts{Allowed: 1, WouldDeny: 1}) {
		t.Errorf("new: %+v, want one allowed and one would-deny (the third request was denied before it)", g)
	}
	d, _ := m.AllowN(context.Background(), "x", 0)
	if d.Limit != 2 {
		t.Errorf("the Multi's decision quotes limit %d, want the enforced part's 2", d.Limit)
	}
}

// The shadow keyword: a shadow rule never denies, reports would-denies
// under its name, and writes back as it was read.
func TestRulesShadowKeyword(t *testing.T) {
	clk := NewManualClock(obsT0)
	log := &eventLog{}
	rs, err := ParseRules(`
		GET /export: 1/m per user shadow as export
		*:           3/s global
	`, WithClock(clk), WithObserver(log))
	if err != nil {
		t.Fatal(err)
	}
	lim := rs.For("GET /export").Rules()
	if !lim[0].Shadow || lim[1].Shadow || lim[0].text() != "GET /export: 1/m burst 1 per user shadow as export" {
		t.Fatalf("parsed %+v; text %q", lim, lim[0].text())
	}
	if _, err := ParseRules(lim[0].text()); err != nil {
		t.Fatalf("the text does not read back: %v", err)
	}
	who := Subject{User: "u"}
	for i := range 3 {
		if !rs.Allow("GET /export", who) {
			t.Fatalf("request %d denied", i)
		}
	}
	if rs.Allow("GET /export", who) {
		t.Fatal("the enforced global rule let a fourth request through")
	}
	var export, global []bool
	for _, e := range log.take() {
		switch e.Limiter {
		case "export":
			if !e.Shadow {
				t.Errorf("the shadow rule's event is not marked: %+v", e)
			}
			export = append(export, e.Allowed)
		case "* 3/s global":
			global = append(global, e.Allowed)
		default:
			t.Errorf("event of %q", e.Limiter)
		}
	}
	if len(export) != 3 || !export[0] || export[1] || export[2] {
		t.Errorf("shadow rule events %v, want allowed then two would-denies (none for the fourth, denied first)", export)
	}
	if len(global) != 4 || !global[2] || global[3] {
		t.Errorf("global rule events %v", global)
	}
}

// BenchmarkAllowObserved is Allow with the ready Counter set, next to the
// same limiter without an observer and with one that does nothing (the
// cost of the full decision and the event alone), on one key and on
// 10,000 keys.
func BenchmarkAllowObserved(b *testing.B) {
	for _, alg := range algorithms {
		for _, keys := range []int{1, 10_000} {
			for _, obs := range []string{"none", "noop", "counter"} {
				lim, err := alg.bench.allow()
				if err != nil {
					b.Fatal(err)
				}
				switch obs {
				case "noop":
					lim = observedCopy(b, alg.name, ObserverFunc(func(Event) {}))
				case "counter":
					lim = observedCopy(b, alg.name, &Counter{})
				}
				ks := benchKeys()[:keys]
				for _, k := range ks {
					lim.Allow(k)
				}
				b.Run(alg.name+"/keys="+itoa(keys)+"/observer="+obs, func(b *testing.B) {
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						lim.Allow(ks[i])
						if i++; i == len(ks) {
							i = 0
						}
					}
				})
			}
		}
	}
}

// observedCopy builds the allowAlgorithms limiter of name with observer o.
func observedCopy(b *testing.B, name string, o Observer) interface{ Allow(string) bool } {
	opts := []Option{WithObserver(o), WithName(name)}
	var l interface{ Allow(string) bool }
	var err error
	switch name {
	case "TokenBucket":
		l, err = NewTokenBucket(PerSecond(1e9), 1e9, opts...)
	case "LeakyBucket":
		l, err = NewLeakyBucket(Every(time.Nanosecond), 1, opts...)
	case "FixedWindow":
		l, err = NewFixedWindow(PerSecond(1e9), opts...)
	case "SlidingLog":
		l, err = NewSlidingLog(Per(8, 250*time.Nanosecond), opts...)
	case "SlidingWindowCounter":
		l, err = NewSlidingWindowCounter(PerSecond(1e9), opts...)
	}
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// A bulkhead reports each TryAcquire and Acquire: taken or refused, the
// permits then free, and how long Acquire waited on the bulkhead's clock.
func TestBulkheadObserver(t *testing.T) {
	clk := NewManualClock(obsT0)
	log := &eventLog{}
	b, err := NewBulkhead(1, WithBulkheadObserver(log), WithBulkheadName("db"), WithBulkheadClock(clk), WithMaxWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !b.TryAcquire() || b.TryAcquire() {
		t.Fatal("want one permit")
	}
	ev := log.take()
	if len(ev) != 2 || !ev[0].Allowed || ev[0].Remaining != 0 || ev[1].Allowed || ev[0].Limiter != "db" {
		t.Fatalf("events %+v", ev)
	}
	done := make(chan error, 1)
	go func() { done <- b.Acquire(context.Background()) }()
	for clk.Timers() == 0 {
		time.Sleep(time.Millisecond) // waits for the waiter to park, not for time to pass
	}
	clk.Advance(time.Second) // the maximum wait passes
	if err := <-done; !errors.Is(err, ErrBulkheadFull) {
		t.Fatalf("Acquire: %v", err)
	}
	if ev := log.take(); len(ev) != 1 || ev[0].Allowed || ev[0].Waited != time.Second {
		t.Fatalf("a timed-out Acquire reported %+v", ev)
	}
	ab, err := NewAdaptiveBulkhead(AdaptiveParams{Min: 1, Initial: 1, Max: 4}, WithBulkheadObserver(log), WithBulkheadName("adaptive"))
	if err != nil {
		t.Fatal(err)
	}
	ab.TryAcquire()
	ab.TryAcquire()
	if ev := log.take(); len(ev) != 2 || !ev[0].Allowed || ev[1].Allowed || ev[1].Limiter != "adaptive" {
		t.Fatalf("adaptive bulkhead events %+v", ev)
	}
	kb, _ := NewKeyedBulkhead(1, WithBulkheadObserver(log))
	kb.TryAcquire("a")
	kb.TryAcquire("a")
	if ev := log.take(); len(ev) != 2 || !ev[0].Allowed || ev[1].Allowed || ev[1].Key != "a" {
		t.Fatalf("keyed bulkhead events %+v", ev)
	}
}

// FuzzTopKeys checks the Space-Saving bounds on any trace: each byte is a
// denial of one of up to 256 keys, k comes from the input.
func FuzzTopKeys(f *testing.F) {
	f.Add(uint8(1), []byte("aaaaabbbc"))
	f.Add(uint8(3), []byte("abcdefabcabaaaaaaaaaz"))
	f.Add(uint8(8), []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 0, 1, 1})
	f.Fuzz(func(t *testing.T, k uint8, trace []byte) {
		top, err := NewTopKeys(int(k%16) + 1)
		if err != nil {
			t.Fatal(err)
		}
		var exact [256]int64
		for _, c := range trace {
			exact[c]++
			top.Observe(Event{Key: string(rune(c))})
		}
		n, kk := int64(len(trace)), int64(k%16)+1
		listed := map[string]KeyCount{}
		for _, kc := range top.Top() {
			listed[kc.Key] = kc
			e := exact[[]rune(kc.Key)[0]]
			if e > kc.Count || e < kc.Count-kc.Error {
				t.Fatalf("%q counted %d (error %d), true %d", kc.Key, kc.Count, kc.Error, e)
			}
		}
		for c, e := range exact {
			if e*kk > n {
				if _, ok := listed[string(rune(c))]; !ok {
					t.Fatalf("key %d denied %d of %d times (k = %d) is not listed", c, e, n, kk)
				}
			}
		}
	})
}

// TestObserversSkipOtherKinds: Counter and TopKeys count decisions only;
// an event of another kind changes neither.
func TestObserversSkipOtherKinds(t *testing.T) {
	var c Counter
	top, err := NewTopKeys(4)
	if err != nil {
		t.Fatal(err)
	}
	other := Event{Limiter: "api", Key: "k", N: 1, Kind: EventKind(200)}
	c.Observe(other)
	c.Bind("api").Observe(other)
	top.Observe(other)
	if got := c.Get("api"); got != (Counts{}) {
		t.Fatalf("Counter counted a non-decision event: %+v", got)
	}
	if top.Denials() != 0 || len(top.Top()) != 0 {
		t.Fatalf("TopKeys counted a non-decision event: %d, %v", top.Denials(), top.Top())
	}
	c.Observe(Event{Limiter: "api", Key: "k", N: 1})
	top.Observe(Event{Limiter: "api", Key: "k", N: 1})
	if got := c.Get("api"); got.Denied != 1 || top.Denials() != 1 {
		t.Fatalf("a denial was not counted: %+v, %d", got, top.Denials())
	}
}
