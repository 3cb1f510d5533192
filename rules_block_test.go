package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseRulesPenalty(t *testing.T) {
	rs, err := ParseRules("POST /login: 5/m per ip block 15m after 5\nPOST /pw: 3/h per user block 1h after 2 within 10m shadow as pw")
	if err != nil {
		t.Fatal(err)
	}
	r := rs.For("POST /login").Rules()[0]
	if r.Penalty != (Penalty{Block: 15 * time.Minute, After: 5}) || r.Scope != PerIP || r.Rate != PerMinute(5) {
		t.Fatalf("login rule %+v", r)
	}
	if _, ok := r.Limiter.(*PenaltyBox); !ok {
		t.Fatalf("login limiter %T, want a PenaltyBox", r.Limiter)
	}
	if txt := r.text(); txt != "POST /login: 5/m burst 5 per ip block 15m0s after 5 as POST /login 5/m per ip" {
		t.Fatalf("text %q", txt)
	}
	pw := rs.For("POST /pw").Rules()[0]
	if pw.Penalty != (Penalty{Block: time.Hour, After: 2, Within: 10 * time.Minute}) || !pw.Shadow || pw.Name != "pw" {
		t.Fatalf("pw rule %+v", pw)
	}
	again, err := ParseRules(pw.text())
	if err != nil || again.For("POST /pw").Rules()[0].Penalty != pw.Penalty {
		t.Fatalf("round trip of %q: %v", pw.text(), err)
	}
	for _, bad := range []string{
		"POST /login: 5/m per ip block 15m after 0",
		"POST /login: 5/m per ip block 15m after -1",
		"POST /login: 5/m per ip block 0s after 5",
		"POST /login: 5/m per ip block -1m after 5",
		"POST /login: 5/m per ip block 15m",
		"POST /login: 5/m per ip block after 5",
		"POST /login: 5/m per ip block 15m after five",
		"POST /login: 5/m per ip block 15m after 5 within",
		"POST /login: 5/m per ip block 15m after 5 within 0s",
		"POST /login: 5/m per ip block 15 after 5",
		"POST /login: 5/m per ip block 15m after 5 block 1m after 2",
		"POST /login: 5/m per ip block 15m after 5000",
	} {
		if _, err := ParseRules(bad); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%q: %v, want ErrInvalidRule", bad, err)
		} else if !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: error %q does not name the line", bad, err)
		}
	}
	// A Penalty set by hand but half set fails loudly.
	for _, p := range []Penalty{{After: 5}, {Block: time.Minute}, {Block: time.Minute, After: 1, Within: -1}} {
		if _, err := NewRules([]Rule{{Class: "x", Rate: PerSecond(1), Scope: Global, Penalty: p}}); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

func TestRulesPenaltyBlocks(t *testing.T) {
	clk := NewManualClock(time.Unix(1_000_000, 0))
	rs, err := ParseRules("POST /login: 5/m per ip block 15m after 5\n*: 1000/s global", WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	who := Subject{IP: "192.0.2.1"}
	allowed := 0
	for i := 0; i < 20; i++ {
		if rs.Allow("POST /login", who) {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("%d allowed, want 5", allowed)
	}
	clk.Advance(2 * time.Minute) // the bucket is full again, the key still blocked
	d, err := rs.Check(ctx, "POST /login", who, 1)
	if err != nil || d.Allowed || d.RetryAfter != 13*time.Minute {
		t.Fatalf("Check while blocked: %+v, %v", d.Decision, err)
	}
	if !rs.Allow("POST /login", Subject{IP: "192.0.2.2"}) {
		t.Fatal("another address refused")
	}
	clk.Advance(13 * time.Minute)
	if !rs.Allow("POST /login", who) {
		t.Fatal("refused after the block")
	}
	// A reload with the same rule keeps the block state; within defaults
	// to the rule's period.
	for i := 0; i < 9; i++ {
		rs.Allow("POST /login", who)
	}
	if err := rs.Reload("POST /login: 5/m per ip block 15m after 5\n*: 1000/s global"); err != nil {
		t.Fatal(err)
	}
	if d, _ := rs.Check(ctx, "POST /login", who, 1); d.Allowed || d.RetryAfter != 15*time.Minute {
		t.Fatalf("after reload: %+v", d.Decision)
	}
}

// TestRulesPenaltyGuesser: the rules form holds a guesser at 1,000
// attempts a second to at most 5 + 5 per 15 minutes over a simulated day.
func TestRulesPenaltyGuesser(t *testing.T) {
	clk := NewManualClock(time.Unix(1_000_000, 0))
	rs, err := ParseRules("POST /login: 5/m per ip block 15m after 5", WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	box := rs.For("POST /login").Rules()[0].Limiter.(*PenaltyBox)
	who := Subject{IP: "203.0.113.9"}
	through := 0
	const step = time.Millisecond
	for at := time.Duration(0); at < 24*time.Hour; at += step {
		if rs.Allow("POST /login", who) {
			through++
		}
		// Every attempt of a block is refused (TestPenaltyBoxOracle): all
		// but its first and last are skipped.
		if left := box.Blocked(who.IP); left > 2*step {
			skip := (left - step) / step * step
			clk.Advance(skip)
			at += skip
		}
		clk.Advance(step)
	}
	if through > 5+5*96 || through < 5*96-5 {
		t.Fatalf("%d through in a day, want at most %d and near it", through, 5+5*96)
	}
}
