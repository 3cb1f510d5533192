package ratelimit

import "testing"

// TestOperatorAction: each operator kind has its own name, and no other
// kind (a decision, a batch, the kinds past the operator range) has one.
func TestOperatorAction(t *testing.T) {
	want := map[EventKind]string{
		EventSetRate: "set_rate", EventSetOverride: "set_override",
		EventRemoveOverride: "remove_override", EventReset: "reset", EventSettle: "settle",
	}
	for k := range 256 {
		kind := EventKind(k)
		if got := OperatorAction(kind); got != want[kind] {
			t.Errorf("OperatorAction(%d) = %q, want %q", k, got, want[kind])
		}
	}
}
