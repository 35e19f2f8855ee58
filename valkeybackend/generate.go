package valkeybackend

// valkeybackend.go is rueidisbackend.go with valkey-go's names.
//go:generate go run ./internal/fork/gen
