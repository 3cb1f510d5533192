package ratelimit

// Event kinds of leases: a backend that hands a key's allowance out in
// leases (the Redis backend's WithLease) reports each lease with these, in
// Event.N units, Event.Key the key and Event.Limiter the limiter's name
// (for the Redis backend, its key prefix). For each lease, the units taken
// are later reported once as spent, returned and lapsed, which add up to
// them (a kind with no units is not reported): the units a limiter holds
// in leases at a time, outstanding, are those taken less those reported
// since as spent, returned or lapsed.
const (
	// EventLeaseTaken reports N units taken from the shared store into a
	// lease, booked there as events.
	EventLeaseTaken EventKind = 30
	// EventLeaseSpent reports, when a lease ends, the N of its units that
	// were spent: admitted locally, each as one event.
	EventLeaseSpent EventKind = 31
	// EventLeaseReturned reports, when a lease ends, the N unspent units
	// settled back to the shared store, which restores them as far as the
	// algorithm's give-back rule allows (otherwise they lapse there).
	EventLeaseReturned EventKind = 32
	// EventLeaseLapsed reports, when a lease ends, the N units that could
	// not be spent in time (the window ended, a token bucket's unit came
	// too late to act without breaking the bound, or the key was Reset)
	// and so were neither spent nor given back.
	EventLeaseLapsed EventKind = 33
)
