package httplimit

import "net/http"

// DefaultAccepted is what Transport counts as a request the server
// accepted, for its Throttle, unless Accepted says otherwise: a response
// (err == nil) whose status is neither 429 Too Many Requests nor a 5xx.
// Client errors (4xx other than 429) count as accepted: the server did the
// work of answering them.
func DefaultAccepted(resp *http.Response, err error) bool {
	return err == nil && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500
}

// AcceptStatus returns an Accepted function for Transport that counts a
// response as accepted when its status is one of codes; a failed round
// trip is never accepted.
func AcceptStatus(codes ...int) func(resp *http.Response, err error) bool {
	set := make(map[int]bool, len(codes))
	for _, c := range codes {
		set[c] = true
	}
	return func(resp *http.Response, err error) bool { return err == nil && set[resp.StatusCode] }
}

// recordThrottle reports the outcome of a request that was sent to the
// Transport's Throttle, if it has one.
func (t *Transport) recordThrottle(resp *http.Response, err error) {
	if t.Throttle == nil {
		return
	}
	accepted := t.Accepted
	if accepted == nil {
		accepted = DefaultAccepted
	}
	t.Throttle.Record(accepted(resp, err))
}
