// Package route finds the class of a request among rule classes written as
// net/http ServeMux patterns ("POST /login", "GET /items/{id}"), as
// ServeMux itself would route it: the most specific pattern wins, HEAD
// matches GET patterns, a pattern without a method matches every method, a
// path ServeMux would redirect counts as the pattern it redirects to. The
// httplimit middleware and the replay command both match through Mux, so
// that a class means the same request to both.
package route

import (
	"fmt"
	"net/http"
	"slices"
)

// CatchAll is registered with the rule patterns (unless a class covers
// it) so that a request matching none of them finds it, rather than the
// not-found path of ServeMux, which allocates. A request that matches it
// and not a class of that name has no class.
const CatchAll = "/"

// PatternError is Mux's error for a class ServeMux refuses.
type PatternError struct {
	Class  string
	Reason any // what ServeMux panicked with
}

func (e *PatternError) Error() string {
	return fmt.Sprintf("rule class %q is not a ServeMux pattern (%v)", e.Class, e.Reason)
}

// Mux returns a ServeMux that routes to each of classes, so that its
// Handler method names the class of a request as the pattern returned. It
// returns a *PatternError for a class that is not a pattern, or that
// conflicts with one before it.
func Mux(classes []string) (*http.ServeMux, error) {
	mux := http.NewServeMux()
	nop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, class := range classes {
		if err := handle(mux, class, nop); err != nil {
			return nil, err
		}
	}
	if !slices.Contains(classes, CatchAll) {
		handle(mux, CatchAll, nop) // fails only if a class such as "/{path...}" covers it
	}
	return mux, nil
}

func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if e := recover(); e != nil {
			err = &PatternError{Class: pattern, Reason: e}
		}
	}()
	mux.Handle(pattern, h)
	return nil
}
