module github.com/ratelimitkit/ratelimit

go 1.26
