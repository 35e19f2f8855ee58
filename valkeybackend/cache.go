package valkeybackend

// This file is the same in rueidisbackend and valkeybackend but for the
// package clause and the import path: the client library is imported as
// lib, and only names both libraries share are used.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fairlock/fairlock/backend"
	lib "github.com/valkey-io/valkey-go"
)

var _ backend.CachedReader = (*Backend)(nil)

// cacheable lists the commands CachedRead accepts (see
// backend.CachedReader): read-only, one key at position 1, a reply that
// changes only when the key is written.
var cacheable = map[string]bool{
	"GET": true, "HGET": true, "HGETALL": true, "HLEN": true,
	"LLEN": true, "LRANGE": true, "ZCARD": true, "ZCOUNT": true, "ZMSCORE": true,
	"ZSCORE": true, "PEXPIRETIME": true,
}

// CachedRead implements backend.CachedReader with the client's
// DoMultiCache: a command the connection has cached is answered without
// a round trip, the others go out in one pipelined write (per node) with
// the client's CLIENT CACHING YES before each, so the server tracks them.
// The client also caps an entry's life at its key's expiry time. It
// returns backend.ErrNotSupported for a client built with DisableCache and
// on servers without CLIENT TRACKING.
func (b *Backend) CachedRead(ctx context.Context, ttl time.Duration, cmds [][]string) ([]backend.Reply, error) {
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("CachedRead: ttl %v is shorter than 1ms", ttl)
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	multi := make([]lib.CacheableTTL, len(cmds))
	for i, c := range cmds {
		if len(c) < 2 || !cacheable[strings.ToUpper(c[0])] {
			return nil, fmt.Errorf("CachedRead: %q is not a command CachedRead can cache (see backend.CachedReader)", c)
		}
		cmd := b.client.B().Arbitrary(c[0]).Keys(c[1]).Args(c[2:]...).ReadOnly()
		multi[i] = lib.CT(lib.Cacheable(cmd), ttl)
	}
	results, err := byDeadline(ctx, b.dials, func() []result { return b.client.DoMultiCache(ctx, multi...) })
	if err != nil {
		return nil, err
	}
	replies := make([]backend.Reply, len(results))
	cached := false
	for i, res := range results {
		// A reply the client put in (or took from) its cache carries the
		// entry's expiry time, a cached nil reply too; a client that does
		// not cache sends the commands as they are, and its replies carry
		// none.
		cached = cached || res.IsCacheHit() || res.CachePTTL() >= 0
		r, err := convert(res)
		if err != nil {
			return nil, err
		}
		replies[i] = r
	}
	if !cached {
		// No reply carried an expiry: the client does not cache, or every
		// entry was invalidated while its read was on the way. Ask.
		if err := b.tracking(ctx); err != nil {
			return nil, err
		}
	}
	return replies, nil
}

// tracking returns nil when the client's connections have CLIENT
// TRACKING on, else backend.ErrNotSupported.
func (b *Backend) tracking(ctx context.Context) error {
	res := b.client.Do(ctx, b.client.B().ClientTrackinginfo().Build())
	if res.Error() != nil {
		_, err := convert(res)
		var se *backend.ServerError
		if errors.As(err, &se) { // a server without CLIENT TRACKINGINFO
			return fmt.Errorf("%w: client-side caching: %v", backend.ErrNotSupported, err)
		}
		return err
	}
	info, err := res.ToAny()
	if err != nil {
		return err
	}
	var flags any
	switch info := info.(type) {
	case map[string]any: // RESP3
		flags = info["flags"]
	case []any: // RESP2: flags, [...], redirect, n, prefixes, [...]
		if i := slices.Index(info, any("flags")); i >= 0 && i+1 < len(info) {
			flags = info[i+1]
		}
	}
	if list, ok := flags.([]any); ok && slices.Contains(list, any("on")) {
		return nil
	}
	return fmt.Errorf("%w: client-side caching is off on this client (DisableCache?)", backend.ErrNotSupported)
}
