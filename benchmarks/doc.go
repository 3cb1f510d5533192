// Package benchmarks measures ratelimit's limiters side by side with peer
// libraries, in one go test run on one machine, so that every figure can be
// quoted as a ratio against a peer measured in the same run.
//
// It is a nested module: the peers are its dependencies, never the core's.
// The benchmarks live in the _test.go files; `make bench` at the repository
// root runs them and prints a benchstat summary and, through cmd/ratios, a
// table of ratios against golang.org/x/time/rate.
//
// Scenarios, each over a table of implementations (adding one is one entry
// in impls_test.go):
//
//   - BenchmarkFloor: reference costs (clock reads, a CAS, a mutex, a map
//     lookup at 10k and 1M keys, the harness's own indirect call), and
//     what the machine charges two cores for writing neighbouring cache
//     lines, each only its own (lines-alternate against lines-apart).
//   - BenchmarkOneKey: one key, on the allow path (a limit never reached)
//     and on the deny path (a limit of one per hour, spent), serial and
//     with b.RunParallel.
//   - BenchmarkKeys: 10k and 1M pre-populated keys of 10 bytes, cycled
//     through by index, serial and parallel, on the allow path.
//   - BenchmarkMemory: live heap retained per key after 1M keys, and what
//     is still held after the keys go idle (time moved past their refill
//     where the implementation takes a clock). Run it with -benchtime 1x.
//   - BenchmarkGrowth: 10M new keys, every call timed (our limiters only,
//     and a row without a limiter for the machine's own slow calls). Run
//     it with -benchtime 1x.
//   - BenchmarkBulkhead: TryAcquire+Release of a concurrency limit.
//   - BenchmarkRedis (redis_test.go, run by `make bench-redis`, not by
//     `make bench`): our Redis token bucket next to go-redis/redis_rate and
//     a bare PING, in decisions per second against a local redis-server.
package benchmarks
