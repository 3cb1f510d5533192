package route

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
)

func class(t *testing.T, mux *http.ServeMux, method, path string) string {
	t.Helper()
	u, err := url.ParseRequestURI(path)
	if err != nil {
		t.Fatal(err)
	}
	_, p := mux.Handler(&http.Request{Method: method, URL: u, Header: http.Header{}})
	return p
}

func TestMux(t *testing.T) {
	mux, err := Mux([]string{"POST /login", "GET /items/{id}", "/admin/"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ method, path, want string }{
		{"POST", "/login", "POST /login"},
		{"GET", "/login", CatchAll},
		{"GET", "/items/7", "GET /items/{id}"},
		{"HEAD", "/items/7", "GET /items/{id}"},
		{"DELETE", "/admin/users", "/admin/"},
		{"GET", "/admin", "/admin/"},         // redirected to /admin/
		{"GET", "/items/../login", CatchAll}, // cleaned to /login, a POST pattern
		{"GET", "/", CatchAll},
	} {
		if got := class(t, mux, tc.method, tc.path); got != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.method, tc.path, got, tc.want)
		}
	}
}

func TestMuxErrors(t *testing.T) {
	var pe *PatternError
	if _, err := Mux([]string{"GET /a/{"}); !errors.As(err, &pe) || pe.Class != "GET /a/{" {
		t.Fatalf("a bad pattern: %v", err)
	}
	if _, err := Mux([]string{"GET /a", "GET /a"}); !errors.As(err, &pe) {
		t.Fatalf("a duplicate: %v", err)
	}
	if _, err := Mux([]string{"/{path...}"}); err != nil {
		t.Fatalf("a class covering the catch-all: %v", err)
	}
}
