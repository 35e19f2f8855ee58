module github.com/fairlock/fairlock/benchmarks

go 1.26.0

replace github.com/fairlock/fairlock => ../

require (
	github.com/bsm/redislock v0.9.4
	github.com/fairlock/fairlock v0.0.0
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/google/pprof v0.0.0-20261016150608-1facf8f91b50
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	github.com/valkey-io/valkey-go v1.0.79
)

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
