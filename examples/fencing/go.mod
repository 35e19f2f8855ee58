module example.com/fencing

go 1.26.0

replace github.com/fairlock/fairlock => ../..

require (
	github.com/fairlock/fairlock v0.0.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/redis/rueidis v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)
