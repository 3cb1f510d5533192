package ratelimit_test

import (
	"fmt"

	"github.com/ratelimitkit/ratelimit"
)

func ExampleParseRate() {
	for _, s := range []string{"2/s", "150/day", "5 per 2s", "1000/h", "ten/s"} {
		r, err := ratelimit.ParseRate(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(r.N, "per", r.Period)
	}
	// Output:
	// 2 per 1s
	// 150 per 24h0m0s
	// 5 per 2s
	// 1000 per 1h0m0s
	// ratelimit: invalid rate "ten/s": count "ten" is not an integer
}
