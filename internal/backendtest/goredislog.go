package backendtest

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// QuietGoRedis drops go-redis' own log lines - a dial failure per
// connection attempt to a killed node, hundreds a failover - until the
// test ends, then puts go-redis' default logger back. go-redis' logger is
// global: tests that call it must not run in parallel with tests that
// read go-redis' log.
func QuietGoRedis(t testing.TB) {
	redis.SetLogger(discardLog{})
	t.Cleanup(func() { redis.SetLogger(stdLog{log.New(os.Stderr, "redis: ", log.LstdFlags|log.Lshortfile)}) })
}

// discardLog is a go-redis logger that drops everything.
type discardLog struct{}

// Printf implements go-redis' logger.
func (discardLog) Printf(context.Context, string, ...any) {}

// stdLog is go-redis' default logger.
type stdLog struct{ l *log.Logger }

// Printf implements go-redis' logger.
func (s stdLog) Printf(_ context.Context, format string, v ...any) {
	_ = s.l.Output(2, fmt.Sprintf(format, v...))
}
