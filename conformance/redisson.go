package conformance

import (
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/redisson"
)

// The Redisson model (internal/redisson) stands in for a Java service
// using RedissonFairLock on the same Redis (X11 in RULES.md): upstream's
// own Lua scripts and call pattern, defects included.
type (
	redissonClient = redisson.Client
	redissonLock   = redisson.Lock
)

// redissonSlack is Redisson's fairLockWaitTimeout default (300 000 ms).
const redissonSlack = redisson.DefaultSlack

// errRedissonNotHeld is Java's IllegalMonitorStateException from unlock.
var errRedissonNotHeld = redisson.ErrNotHeld

// withRedissonSlack sets fairLockWaitTimeout (default 300 s).
func withRedissonSlack(d time.Duration) redisson.Option { return redisson.WithSlack(d) }

// newRedisson returns a Redisson model client on a new backend of the
// server under test.
func (s *suite) newRedisson(t *testing.T, opts ...redisson.Option) *redissonClient {
	t.Helper()
	cb := s.newBackend(t)
	c, err := redisson.New(cb, cb.Sharded(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
