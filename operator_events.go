package ratelimit

// Operator actions: the changes an operator makes at run time are reported
// to the limiter's observer (WithObserver), as an audit trail, each as an
// Event of its own kind. Observers that count decisions skip them (they
// are not EventDecision). The in-memory limiters report them, and so do
// the Redis backend's (to redis.WithObserver's observer); the fields
// each kind fills are in its doc, the others are zero.
const (
	// EventSetRate: SetRate changed the limiter's parameters. Limiter is
	// set; N is the most events one call may now ask for (the capacity,
	// or the window's limit).
	EventSetRate EventKind = 40 + iota
	// EventSetOverride: SetOverride gave Key parameters of its own; N is
	// the most events one call on Key may now ask for.
	EventSetOverride
	// EventRemoveOverride: RemoveOverride took Key's override away (only
	// when it had one).
	EventRemoveOverride
	// EventReset: Reset set Key up afresh.
	EventReset
	// EventSettle: a reservation on Key was settled (Reservation.Settle)
	// at N events; Allowed is true and Remaining is the key's after the
	// settlement.
	EventSettle
)

// OperatorAction names the operator action an event kind reports, as the
// metrics modules label it (set_rate, set_override, remove_override,
// reset, settle), or "" for a kind that is not an operator action.
func OperatorAction(k EventKind) string {
	switch k {
	case EventSetRate:
		return "set_rate"
	case EventSetOverride:
		return "set_override"
	case EventRemoveOverride:
		return "remove_override"
	case EventReset:
		return "reset"
	case EventSettle:
		return "settle"
	}
	return ""
}

// operator reports an operator action of kind on key; k.obs is not nil.
func (o *observed) operator(kind EventKind, key string, n, remaining int) {
	o.obs.Observe(Event{Limiter: o.name, Key: key, N: n, Allowed: kind == EventSettle, Remaining: remaining, Kind: kind})
}

// reportOperator reports an operator action, if the limiter has an
// observer.
func (k *keyed[S, P, A]) reportOperator(kind EventKind, key string, n, remaining int) {
	if k.obs != nil {
		k.obs.operator(kind, key, n, remaining)
	}
}
