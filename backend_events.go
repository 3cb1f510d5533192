package ratelimit

// Events of the backends (kinds 20 to 29).

// EventBatch reports that a backend sent several decisions to its server
// in one call: the Redis backend's coalescing (see its docs). N is how many
// of the limiter's decisions the batch held and Limiter the limiter's
// name (a batch shared by several limiters is reported to each, with its
// own count); every other field is zero. It is reported once per batch the backend's queue sent
// (N >= 1), not per decision; a decision that went out at once, with
// nothing queued before it, is not one. An observer that counts decisions
// must skip it (see Event.Kind).
const EventBatch EventKind = 20
