package redis_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/ratelimitkit/ratelimit"
	rlredis "github.com/ratelimitkit/ratelimit/redis"
	goredis "github.com/redis/go-redis/v9"
)

// A token bucket of 20 requests, refilled at 10 per second, per client IP,
// shared by every replica of a service through one Redis.
func Example() {
	client := goredis.NewClient(&goredis.Options{
		Addr:                  "localhost:6379",
		ContextTimeoutEnabled: true, // calls bounded by their context, no helper goroutine
		MaxRetries:            -1,   // while Redis is down, fail at once...
		DialerRetries:         1,    // ...and let the failure policy answer
	})
	defer client.Close()

	lim, err := rlredis.NewTokenBucket(client, ratelimit.PerSecond(10), 20,
		rlredis.WithPrefix("api:ip:"),
		rlredis.WithTimeout(50*time.Millisecond),
		rlredis.WithFailurePolicy(rlredis.FailLocal), // per-replica limits while Redis is down
		rlredis.WithOnError(func(key string, err error) { log.Printf("rate limiter: %v", err) }),
	)
	if err != nil {
		log.Fatal(err)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if !lim.Allow(r.RemoteAddr) {
			http.Error(w, "too many requests", http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("hello\n"))
	})
}

// Support unlocks a user locked out of logging in: the key starts afresh,
// full, for every replica at once.
func ExampleTokenBucket_Reset() {
	client := goredis.NewClient(&goredis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()

	logins, err := rlredis.NewTokenBucket(client, ratelimit.PerHour(5), 5, rlredis.WithPrefix("login:user:"))
	if err != nil {
		log.Fatal(err)
	}
	if err := logins.Reset(context.Background(), "alice"); err != nil {
		log.Printf("not reset, try again: %v", err) // Redis unreachable
	}
}
