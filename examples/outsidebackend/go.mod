module example.com/outsidebackend

go 1.26.0

require (
	github.com/fairlock/fairlock v0.0.0
	github.com/redis/rueidis v1.0.79
)

require (
	github.com/anishathalye/porcupine v1.3.1 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace github.com/fairlock/fairlock => ../..
