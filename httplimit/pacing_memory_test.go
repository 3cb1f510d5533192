package httplimit

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitkit/ratelimit"
)

// TestPacerMemoryInBytes: a policy name is kept copied and capped at
// maxPaceName bytes, so a header whose names are substrings of 1 MiB
// lines keeps none of those lines alive: the heap a Pacer holds after GC
// stays within the bound the doc states (maxPacePolicies × maxPaceName
// bytes of names per key), measured.
func TestPacerMemoryInBytes(t *testing.T) {
	clk := ratelimit.NewManualClock(time.Unix(1_700_000_000, 0))
	p := &Pacer{Clock: clk}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	p.Observe("warm", http.Header{hdrRateLimit: {`"w";r=5;t=30`}})
	before := heap()
	for i := 0; i < maxPacePolicies; i++ {
		h := http.Header{}
		h.Set(hdrRateLimit, fmt.Sprintf(`"p%d-%s";r=5;t=30`, i, strings.Repeat("a", 1<<20)))
		p.Observe("api.example", h)
	}
	after := heap()
	runtime.KeepAlive(p)
	p.mu.Lock()
	host := p.hosts["api.example"]
	n := len(host.policies)
	for _, pol := range host.policies {
		if len(pol.name) > maxPaceName {
			t.Errorf("a name of %d bytes kept, cap %d", len(pol.name), maxPaceName)
		}
	}
	p.mu.Unlock()
	if n != maxPacePolicies {
		t.Fatalf("%d policies kept, want %d (distinct names)", n, maxPacePolicies)
	}
	// The names (at most 8 × maxPaceName), the policies and the host's
	// entry: well under 64 KiB; a kept line would be 1 MiB each.
	if grown := int64(after) - int64(before); grown > 64<<10 {
		t.Errorf("the Pacer holds %d bytes more after GC for %d policies, want at most 64 KiB", grown, n)
	}
}
