package ratelimit

// step is each algorithm's decision with its description, as the tests of
// the pure steps call it.

func (p *tbParams) step(s *tbState, now, n, maxWait int64) (Decision, booked, bool) {
	return decide(p, s, now, n, maxWait)
}

func (p *lbParams) step(s *lbState, now, n, maxWait int64) (Decision, booked, bool) {
	return decide(p, s, now, n, maxWait)
}

func (p *fwParams) step(s *fwState, now, n, maxWait int64) (Decision, booked, bool) {
	return decide(p, s, now, n, maxWait)
}

func (p *slParams) step(s *slState, now, n, maxWait int64) (Decision, booked, bool) {
	return decide(p, s, now, n, maxWait)
}

func (p *swcParams) step(s *swcState, now, n, maxWait int64) (Decision, booked, bool) {
	return decide(p, s, now, n, maxWait)
}

// stepAlgo is an algorithm's pure step as a value, for the tests that
// drive one key's state through it.
type stepAlgo[S any] interface {
	init(s *S, now int64)
	step(s *S, now, n, maxWait int64) (Decision, booked, bool)
	unstep(s *S, n int64, b booked, at int64)
}
