package httplimit

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

type fixedBase struct{}

func (fixedBase) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(""))}, nil
}

// BenchmarkTransportNoThrottle is the round trip of a Transport without
// Throttle over a Base that answers at once.
func BenchmarkTransportNoThrottle(b *testing.B) {
	tr := &Transport{Base: fixedBase{}}
	req, _ := http.NewRequest("GET", "http://api.example/", nil)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}
