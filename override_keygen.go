package ratelimit

// A change of one key's override voids the bookings of that key alone: it
// moves the key to a new generation (see keyed.resets), as a Reset does,
// instead of moving the limiter's epoch on, which would void the
// bookings of every key. setKeyGen sets a held key's generation without
// touching the rest of its state.

func (p *tbParams) setKeyGen(s *tbState, gen uint32)   { s.kgen = gen }
func (p *lbParams) setKeyGen(s *lbState, gen uint32)   { s.kgen = gen }
func (p *fwParams) setKeyGen(s *fwState, gen uint32)   { s.kgen = gen }
func (p *slParams) setKeyGen(s *slState, gen uint32)   { s.kgen = gen }
func (p *swcParams) setKeyGen(s *swcState, gen uint32) { s.kgen = gen }
