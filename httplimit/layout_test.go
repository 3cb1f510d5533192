package httplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// logging stands for any handler a server puts between the middleware and
// its mux.
func logging(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) })
}

func loginMux(h http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	for _, p := range []string{"POST /login", "GET /items/{id}", "/files/", "admin.example.com/", "/"} {
		mux.Handle(p, h)
	}
	return mux
}

// RulesMiddleware enforces a per-route rule in every layout a server
// writes: around the mux, around a handler in front of the mux, mounted on
// an outer mux, under StripPrefix, and around the route's own handler.
// Whatever pattern an outer mux matched, the rule's own pattern decides.
func TestRulesMiddlewareLayouts(t *testing.T) {
	type mw = func(http.Handler) http.Handler
	layouts := []struct {
		name   string
		prefix string // the path prefix the outer layers add
		build  func(rm mw, h http.Handler) http.Handler
	}{
		{"around the mux", "", func(rm mw, h http.Handler) http.Handler { return rm(loginMux(h)) }},
		{"around logging(mux)", "", func(rm mw, h http.Handler) http.Handler { return rm(logging(loginMux(h))) }},
		{"inside logging", "", func(rm mw, h http.Handler) http.Handler { return logging(rm(loginMux(h))) }},
		{"mounted on an outer mux", "", func(rm mw, h http.Handler) http.Handler {
			outer := http.NewServeMux()
			outer.Handle("/", rm(loginMux(h)))
			return outer
		}},
		{"under StripPrefix", "/api", func(rm mw, h http.Handler) http.Handler {
			root := http.NewServeMux()
			root.Handle("/api/", http.StripPrefix("/api", rm(loginMux(h))))
			return root
		}},
		{"around the route's handler", "", func(rm mw, h http.Handler) http.Handler { return loginMux(rm(h)) }},
	}
	// Rules written with the full path apply under StripPrefix too.
	t.Run("StripPrefix with full-path rules", func(t *testing.T) {
		root := http.NewServeMux()
		root.Handle("/api/", http.StripPrefix("/api", RulesMiddleware(mustRules(t, "POST /api/login: 2/h per ip"))(loginMux(okHandler))))
		for i, want := range []int{200, 200, 429, 429} {
			if w := serveHost(root, "POST", "example.com", "/api/login", "192.0.2.1:1"); w.Code != want {
				t.Fatalf("request %d: %d, want %d", i, w.Code, want)
			}
		}
		if w := serveHost(root, "GET", "example.com", "/api/login", "192.0.2.1:1"); w.Code != 200 {
			t.Errorf("GET: %d", w.Code)
		}
	})
	// Each case: a rule, the requests it limits to an allowance of 2, and
	// requests it must leave alone.
	cases := []struct {
		rule    string
		limited []string // "METHOD host path"
		free    []string
	}{
		{"POST /login: 2/h per ip", []string{"POST example.com /login"}, []string{"GET example.com /login", "POST example.com /login/x"}},
		// HEAD is limited by a GET rule, as ServeMux routes it.
		{"GET /items/{id}: 2/h per ip", []string{"GET example.com /items/7", "HEAD example.com /items/8"}, []string{"GET example.com /items/7/x", "POST example.com /items/7"}},
		// A subtree pattern limits everything below it, any method.
		{"/files/: 2/h per ip", []string{"GET example.com /files/a", "PUT example.com /files/b/c", "GET example.com /files/"}, []string{"GET example.com /filesx"}},
		// A host pattern limits that host only, whatever the port.
		{"admin.example.com/: 2/h per ip", []string{"GET admin.example.com /", "POST admin.example.com:8443 /x"}, []string{"GET example.com /"}},
		// A method-less rule limits every method.
		{"/login: 2/h per ip", []string{"POST example.com /login", "DELETE example.com /login"}, []string{"GET example.com /login/"}},
		// A request no rule pattern matches (whatever the mux answers:
		// here its "/" route; a 404 elsewhere) gets the "*" rules.
		{"POST /login: 5/h per ip\n*: 2/h per ip", []string{"GET example.com /nowhere", "DELETE example.com /items/7"}, nil},
		// The missing slash ServeMux redirects for, and an unclean path,
		// count as the pattern they are sent on to.
		{"/files/: 2/h per ip", []string{"GET example.com /files", "GET example.com /x/../files/a"}, nil},
	}
	for _, l := range layouts {
		for _, c := range cases {
			for _, req := range c.limited {
				t.Run(l.name+"/"+c.rule+"/"+req, func(t *testing.T) {
					hits := 0
					h := l.build(RulesMiddleware(mustRules(t, c.rule)), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
					f := strings.Fields(req)
					var codes []int
					for range 4 {
						codes = append(codes, serveHost(h, f[0], f[1], l.prefix+f[2], "192.0.2.1:1").Code)
					}
					redirects := 0
					for _, c := range codes {
						if c >= 300 && c < 400 {
							redirects++
						}
					}
					// Never more than the allowance reaches the handler;
					// unless an outer mux redirected every time (the
					// request never reached the limited part), the
					// allowance is spent and the rest are refused.
					if hits > 2 || redirects < 4 && (codes[2] != 429 || codes[3] != 429) {
						t.Fatalf("responses %v, %d reached the handler: want at most 2, then 429", codes, hits)
					}
				})
			}
			for _, req := range c.free {
				t.Run(l.name+"/"+c.rule+"/free/"+req, func(t *testing.T) {
					h := l.build(RulesMiddleware(mustRules(t, c.rule)), okHandler)
					f := strings.Fields(req)
					for i := range 4 {
						if w := serveHost(h, f[0], f[1], l.prefix+f[2], "192.0.2.1:1"); w.Code == 429 || w.Header().Get("RateLimit") != "" {
							t.Fatalf("request %d: %d %v: limited by a rule that does not match it", i, w.Code, w.Header())
						}
					}
				})
			}
		}
	}
}

func serveHost(h http.Handler, method, host, path, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://"+host+path, nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A rule class that no ServeMux pattern could match would never apply: the
// middleware refuses it at construction unless WithClass names classes.
func TestRulesMiddlewareRefusesUnmatchableClasses(t *testing.T) {
	for _, config := range []string{
		"login: 1/s per ip",
		"POST login: 1/s per ip",
		"GET /a/{x}: 1/s per ip\nGET /{y}/b: 1/s per ip", // ServeMux refuses the pair
		"GET  /a: 1/s per ip\nGET /a: 2/s per ip",        // one pattern written twice
	} {
		func() {
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.HasPrefix(s, "httplimit: ") {
					t.Errorf("%q: recovered %v, want an httplimit panic", config, r)
				}
			}()
			RulesMiddleware(mustRules(t, config))
		}()
		// With WithClass, the classes are the caller's.
		RulesMiddleware(mustRules(t, config), WithClass(func(*http.Request) string { return "login" }))
	}
}

// A class function that cannot name a request's class fails loudly: 500,
// through the error handler, never a silent pass.
func TestRulesMiddlewareNoClass(t *testing.T) {
	rules := mustRules(t, "login: 1/h per ip")
	var logged []string
	h := RulesMiddleware(rules, WithClass(func(*http.Request) string { return "" }), withLog(func(s string) { logged = append(logged, s) }))(okHandler)
	for i := range 3 {
		if w := serve(h, "POST", "/login", "192.0.2.1:1"); w.Code != 500 {
			t.Fatalf("request %d: %d, want 500", i, w.Code)
		}
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "class") {
		t.Errorf("logged %q, want one line about the class", logged)
	}
	var got error
	h = RulesMiddleware(rules, WithClass(func(*http.Request) string { return "" }),
		WithErrorHandler(func(w http.ResponseWriter, r *http.Request, err error) { got = err; w.WriteHeader(418) }))(okHandler)
	if w := serve(h, "POST", "/login", "192.0.2.1:1"); w.Code != 418 || !errors.Is(got, ErrNoClass) {
		t.Errorf("custom error handler: %d, %v", w.Code, got)
	}
}
