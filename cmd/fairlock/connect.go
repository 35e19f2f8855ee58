package main

import (
	"context"
	"crypto/fips140"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/fairlock/fairlock/valkeybackend"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// server is the Redis server a command talks to: a real one named by --addr
// or REDIS_URL, or an embedded miniredis started in this process.
type server struct {
	url         string   // "host:port" or a URL as given; "" when embedded
	addrs       []string // the addresses dialled, for messages (no credentials)
	embedded    *miniredis.Miniredis
	dialTimeout time.Duration
}

// server resolves the server from --addr, else REDIS_URL. With neither it
// starts an embedded miniredis when embeddedOK, else it is a usage error.
// A malformed address is a usage error; nothing is dialled yet.
func (c connFlags) server(e env, embeddedOK bool) (*server, error) {
	raw, from := c.addr, "--addr"
	if raw == "" {
		raw, from = strings.TrimSpace(e.getenv("REDIS_URL")), "REDIS_URL"
	}
	if c.dialTimeout <= 0 {
		return nil, usageError("--dial-timeout must be positive, got %v", c.dialTimeout)
	}
	if raw == "" {
		if !embeddedOK {
			return nil, usageError("no server: set --addr or REDIS_URL")
		}
		return startEmbedded(c.dialTimeout)
	}
	addrs, err := parseAddr(raw)
	if err != nil {
		return nil, usageError("bad %s %q: %v", from, redact(raw), err)
	}
	return &server{url: raw, addrs: addrs, dialTimeout: c.dialTimeout}, nil
}

// startEmbedded starts a miniredis on a free loopback port. Its TTLs follow
// the wall clock (ClockTTL), so leases really run out, as on Redis. The
// embedded server stands in for Redis, which names scripts by their SHA-1:
// in Go's FIPS 140-only mode its goroutines are exempted from enforcement
// (fips140.WithoutEnforcement, inherited by the goroutines it starts);
// fairlock's side computes no SHA-1 either way.
func startEmbedded(dialTimeout time.Duration) (*server, error) {
	mr := miniredis.NewMiniRedis()
	mr.ClockTTL(true)
	var err error
	fips140.WithoutEnforcement(func() { err = mr.StartAddr("127.0.0.1:0") })
	if err != nil {
		return nil, fmt.Errorf("starting the embedded server: %w", err)
	}
	return &server{addrs: []string{mr.Addr()}, embedded: mr, dialTimeout: dialTimeout}, nil
}

// parseAddr checks a "host:port" address or a redis://, rediss://,
// valkey://, valkeys:// or unix:// URL and returns the addresses it names.
func parseAddr(raw string) ([]string, error) {
	if strings.Contains(raw, "://") {
		opt, err := rueidis.ParseURL(raw)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // without the URL, which may hold a password
			}
			return nil, err
		}
		if strings.HasPrefix(raw, "unix://") {
			return opt.InitAddress, nil
		}
		for _, a := range opt.InitAddress {
			if err := checkHostPort(a); err != nil {
				return nil, err
			}
		}
		return opt.InitAddress, nil
	}
	if err := checkHostPort(raw); err != nil {
		return nil, fmt.Errorf("%v (want host:port or a redis:// URL)", err)
	}
	return []string{raw}, nil
}

// checkHostPort checks a "host:port" address.
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err)
		}
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// redact hides the password of a URL for messages.
func redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return raw
	}
	if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return raw
}

// String describes the server for people.
func (s *server) String() string {
	if s.embedded != nil {
		return "embedded miniredis at " + s.addrs[0]
	}
	return strings.Join(s.addrs, ",")
}

// Close stops the embedded server, if any.
func (s *server) Close() {
	if s.embedded != nil {
		s.embedded.Close()
	}
}

// endpoint is one client library's connection to the server, adapted for
// package lock.
type endpoint struct {
	name     string // backendRueidis, backendValkey or backendGoRedis
	tracking bool   // client tracking is on: head waiters watch the lock key
	backend  interface {
		backend.Backend
		Close() error
	}
	del         func(ctx context.Context, keys ...string) error          // DEL in one slot
	exists      func(ctx context.Context, keys ...string) (int64, error) // EXISTS in one slot
	closeClient func()
}

// open connects to the server with the named client library, with the
// library's defaults: rueidis and valkey-go detect a cluster by themselves
// (go-redis is asked for a cluster client when INFO says so), and turn on
// client tracking, which lets the head waiter watch the lock key (the lock
// reads nothing through the cache). A server without CLIENT TRACKING
// (miniredis, some proxies) gets a second try without it; the embedded
// miniredis gets a single-node client without it at once. A server that
// cannot be reached is an unreachableError, which says what answered
// instead of a Redis server when something did (see diagnose).
func (s *server) open(name string) (*endpoint, error) {
	if err := checkBackend(name); err != nil {
		return nil, err
	}
	var ep *endpoint
	var err error
	switch name {
	case backendRueidis:
		ep, err = s.openRueidis()
	case backendValkey:
		ep, err = s.openValkey()
	default:
		ep, err = s.openGoRedis()
	}
	if err != nil {
		if s.embedded == nil {
			if d := s.diagnose(); d != nil {
				err = fmt.Errorf("%w (%s said: %v)", d, name, err)
			}
		}
		return nil, unreachableError(fmt.Errorf("cannot connect to %s with %s: %w", s, name, err))
	}
	return ep, nil
}

func (s *server) openRueidis() (*endpoint, error) {
	opt := rueidis.ClientOption{InitAddress: s.addrs}
	if s.url != "" && strings.Contains(s.url, "://") {
		var err error
		if opt, err = rueidis.ParseURL(s.url); err != nil {
			return nil, err
		}
	}
	opt.DisableCache = s.embedded != nil
	opt.ForceSingleClient = s.embedded != nil
	if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = s.dialTimeout
	}
	rc, err := rueidis.NewClient(opt)
	if errors.Is(err, rueidis.ErrNoCache) {
		opt.DisableCache = true
		rc, err = rueidis.NewClient(opt)
	}
	if err != nil {
		return nil, err
	}
	return &endpoint{
		name:     backendRueidis,
		tracking: !opt.DisableCache,
		backend:  rueidisbackend.New(rc),
		del: func(ctx context.Context, keys ...string) error {
			return rc.Do(ctx, rc.B().Del().Key(keys...).Build()).Error()
		},
		exists: func(ctx context.Context, keys ...string) (int64, error) {
			return rc.Do(ctx, rc.B().Exists().Key(keys...).Build()).AsInt64()
		},
		closeClient: rc.Close,
	}, nil
}

func (s *server) openValkey() (*endpoint, error) {
	opt := valkey.ClientOption{InitAddress: s.addrs}
	if s.url != "" && strings.Contains(s.url, "://") {
		var err error
		if opt, err = valkey.ParseURL(s.url); err != nil {
			return nil, err
		}
	}
	opt.DisableCache = s.embedded != nil
	opt.ForceSingleClient = s.embedded != nil
	if opt.Dialer.Timeout == 0 {
		opt.Dialer.Timeout = s.dialTimeout
	}
	vc, err := valkey.NewClient(opt)
	if errors.Is(err, valkey.ErrNoCache) {
		opt.DisableCache = true
		vc, err = valkey.NewClient(opt)
	}
	if err != nil {
		return nil, err
	}
	return &endpoint{
		name:     backendValkey,
		tracking: !opt.DisableCache,
		backend:  valkeybackend.New(vc),
		del: func(ctx context.Context, keys ...string) error {
			return vc.Do(ctx, vc.B().Del().Key(keys...).Build()).Error()
		},
		exists: func(ctx context.Context, keys ...string) (int64, error) {
			return vc.Do(ctx, vc.B().Exists().Key(keys...).Build()).AsInt64()
		},
		closeClient: vc.Close,
	}, nil
}

// openGoRedis connects with go-redis, which dials lazily: a PING (and INFO
// cluster) within --dial-timeout checks the server now. The adapter needs
// ContextTimeoutEnabled (see package goredisbackend).
func (s *server) openGoRedis() (*endpoint, error) {
	opt := &redis.Options{Addr: s.addrs[0]}
	if s.url != "" && strings.Contains(s.url, "://") {
		var err error
		if opt, err = redis.ParseURL(s.url); err != nil {
			return nil, err
		}
	}
	if opt.DialTimeout == 0 {
		opt.DialTimeout = s.dialTimeout
	}
	opt.ContextTimeoutEnabled = true
	// The command reports errors itself: go-redis would also log them,
	// in lines of its own on stderr.
	logging.Disable()
	// go-redis would log its attempts at these optional handshakes.
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	ctx, cancel := context.WithTimeout(context.Background(), s.dialTimeout)
	defer cancel()
	var rc redis.UniversalClient = redis.NewClient(opt)
	info, err := rc.Info(ctx, "cluster").Result()
	var reply redis.Error
	if errors.As(err, &reply) {
		// A server without INFO cluster (miniredis, some proxies) is no
		// cluster node: a PING checks it.
		info, err = "", rc.Ping(ctx).Err()
	}
	if err != nil {
		_ = rc.Close()
		return nil, err
	}
	if strings.Contains(info, "cluster_enabled:1") {
		_ = rc.Close()
		rc = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: s.addrs, Username: opt.Username, Password: opt.Password, TLSConfig: opt.TLSConfig,
			DialTimeout: opt.DialTimeout, ContextTimeoutEnabled: true, DisableIdentity: true,
			MaintNotificationsConfig: opt.MaintNotificationsConfig,
		})
		if err := rc.Ping(ctx).Err(); err != nil {
			_ = rc.Close()
			return nil, err
		}
	}
	return &endpoint{
		name:    backendGoRedis,
		backend: goredisbackend.New(rc),
		del: func(ctx context.Context, keys ...string) error {
			return rc.Del(ctx, keys...).Err()
		},
		exists: func(ctx context.Context, keys ...string) (int64, error) {
			return rc.Exists(ctx, keys...).Result()
		},
		closeClient: func() { _ = rc.Close() },
	}, nil
}

// Close closes the subscription connection and the client.
func (ep *endpoint) Close() {
	_ = ep.backend.Close()
	ep.closeClient()
}

// lockConn is a connection to a server, a lock client on it and a Mutex
// for one lock: what the commands that look at or act on one lock use.
type lockConn struct {
	srv    *server
	ep     *endpoint
	client *lock.Client
	m      *lock.Mutex
}

// openLock connects to the server the flags name (never an embedded one)
// and opens a lock client with a Mutex for lock name.
func (c connFlags) openLock(e env, name string) (*lockConn, error) {
	srv, err := c.server(e, false)
	if err != nil {
		return nil, err
	}
	lc := &lockConn{srv: srv}
	if lc.ep, err = srv.open(c.backend()); err != nil {
		lc.Close()
		return nil, err
	}
	if lc.client, err = lock.NewClient(lc.ep.backend, c.lockOptions()...); err == nil {
		lc.m, err = lc.client.NewMutex(name)
	}
	if err != nil {
		lc.Close()
		return nil, usageError("%v", err)
	}
	return lc, nil
}

// Close closes the lock client, the endpoint and the server connection.
func (lc *lockConn) Close() {
	if lc.client != nil {
		lc.client.Close()
	}
	if lc.ep != nil {
		lc.ep.Close()
	}
	lc.srv.Close()
}

// lockOptions are the lock client options the flags ask for: the key
// prefix, if any.
func (c connFlags) lockOptions() []lock.Option {
	if c.prefix == "" {
		return nil
	}
	return []lock.Option{lock.WithKeyPrefix(c.prefix)}
}
