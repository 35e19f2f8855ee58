package lock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/internal/wire"
)

// The server's memory policy (X18). Every lock key carries a TTL, so a
// server with a memory limit and any policy but noeviction may evict a
// held lock's hash when memory runs short, and the next waiter then gets
// the lock while the holder still works. NewClient reads the policy
// (server_info.lua: INFO memory) and refuses such a server unless
// WithEvictionRisk accepts it; after a reconnect of the subscription
// connection the client reads it again, and while the server may evict,
// acquires fail with ErrEvictionPolicy. A server that does not tell (INFO
// renamed or forbidden to the user, a proxy) is let through, and so is
// one that cannot be reached while NewClient runs.

// memoryCheckTimeout bounds one reading of the memory policy.
const memoryCheckTimeout = 5 * time.Second

// memoryPolicy holds the latest finding: nil while the server is not
// known to evict.
type memoryPolicy struct {
	evicts atomic.Pointer[error]
}

// err returns the error acquires fail with, or nil.
func (p *memoryPolicy) err() error {
	if e := p.evicts.Load(); e != nil {
		return *e
	}
	return nil
}

// readServer reads the server's memory policy and version (server_info.lua),
// and reports whether the server told.
func readServer(ctx context.Context, b backend.Backend, s *wire.Scripts) (wire.Server, bool) {
	ctx, cancel := context.WithTimeout(ctx, memoryCheckTimeout)
	defer cancel()
	call := wire.ServerInfo(s)
	rep, err := b.Eval(ctx, call.Script, call.Keys, call.Args)
	if err != nil {
		return wire.Server{}, false // the server does not tell, or cannot be reached now
	}
	m, err := wire.DecodeServer(rep)
	return m, err == nil
}

// readMemoryPolicy reads the server's memory policy and returns
// ErrEvictionPolicy, wrapped with what the server said, when it may evict
// lock keys; nil when it will not or does not tell.
func readMemoryPolicy(ctx context.Context, b backend.Backend, s *wire.Scripts) error {
	m, _ := readServer(ctx, b, s)
	return evictionError(m)
}

// evictionError is ErrEvictionPolicy, wrapped with what the server said,
// when m may evict lock keys; nil otherwise.
func evictionError(m wire.Server) error {
	if !m.Evicts() {
		return nil
	}
	return fmt.Errorf("%w: maxmemory %d bytes with maxmemory-policy %s evicts keys with a TTL when memory is full, a held lock among them, and the next waiter then gets it while the holder still works; set maxmemory-policy noeviction (or no maxmemory) on the server, or accept the risk with lock.WithEvictionRisk()", ErrEvictionPolicy, m.MaxMemory, m.Policy)
}

// reread reads the policy again (after a reconnect) and records the
// finding for the acquires to come.
func (p *memoryPolicy) reread(ctx context.Context, b backend.Backend, s *wire.Scripts) {
	if err := readMemoryPolicy(ctx, b, s); err != nil {
		p.evicts.Store(&err)
		return
	}
	p.evicts.Store(nil)
}

// outOfMemory wraps err with ErrOutOfMemory when the server refused a
// write because its memory is full (an OOM error reply). The server
// refuses a script's first write that way, before the script has changed
// anything, so the queue stays as it was.
func outOfMemory(err error) error {
	var se *backend.ServerError
	if errors.As(err, &se) && (strings.HasPrefix(se.Message, "OOM ") || strings.Contains(se.Message, " OOM command not allowed")) {
		return fmt.Errorf("%w: %w", ErrOutOfMemory, err)
	}
	return err
}

// settle reads what NewClient needs to know of the server - its memory
// policy (unless WithEvictionRisk) and, for PublishAuto on a cluster,
// whether it has sharded pub/sub - and settles how the client wakes
// waiters (WithPublish). It fails with ErrEvictionPolicy for a server
// that may evict lock keys, and with ErrInvalidArgument for
// PublishSharded without a cluster backend.
func (c *config) settle(b backend.Backend, s *wire.Scripts) error {
	ss, ok := b.(backend.ShardedSubscriber)
	cluster := ok && ss.Sharded()
	var server wire.Server
	told := false
	if !c.evictionRisk || (c.wakeUps == PublishAuto && cluster) {
		server, told = readServer(context.Background(), b, s)
	}
	if !c.evictionRisk {
		if err := evictionError(server); err != nil {
			return err
		}
	}
	switch c.wakeUps {
	case PublishAuto:
		c.sharded, c.publish = false, "publish"
		if cluster && told && server.ShardedPubSub() {
			c.sharded, c.publish = true, "spublish"
		}
	case PublishPlain:
		c.publish = "publish"
	case PublishSharded:
		if !cluster {
			return fmt.Errorf("%w: PublishSharded needs a cluster backend (a backend.ShardedSubscriber whose Sharded reports true)", ErrInvalidArgument)
		}
		c.sharded, c.publish = true, "spublish"
	case PublishBoth:
		c.sharded, c.publish = cluster, "publish,spublish"
	}
	return nil
}
