package grpclimit

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratelimitkit/ratelimit"
)

// DefaultAccepted is what Client counts as a call the server accepted,
// for its Throttle, unless Accepted says otherwise: a call that succeeded
// or failed with a status other than ResourceExhausted, Unavailable,
// Internal, Unknown and DeadlineExceeded (the codes of a server that is
// overloaded or failing; an error that is not a status reads as Unknown).
func DefaultAccepted(err error) bool {
	switch status.Code(err) {
	case codes.ResourceExhausted, codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded:
		return false
	}
	return true
}

// AcceptCodes returns an Accepted function for Client that counts a call
// as accepted when its status code (OK for a nil error) is one of cs.
func AcceptCodes(cs ...codes.Code) func(err error) bool {
	set := make(map[codes.Code]bool, len(cs))
	for _, c := range cs {
		set[c] = true
	}
	return func(err error) bool { return set[status.Code(err)] }
}

// throttleAllow asks the Client's Throttle, if it has one, whether a call
// may be sent; it returns the error of a call rejected locally.
func (c *Client) throttleAllow(ctx context.Context) error {
	if c.Throttle == nil || c.Throttle.Allow() {
		return nil
	}
	return clientError(ctx, ratelimit.ErrThrottled)
}

// throttleRecord reports the outcome of a sent call to the Throttle.
func (c *Client) throttleRecord(err error) {
	if c.Throttle == nil {
		return
	}
	accepted := c.Accepted
	if accepted == nil {
		accepted = DefaultAccepted
	}
	c.Throttle.Record(accepted(err))
}
