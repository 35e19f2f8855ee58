package main

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"

	"github.com/fairlock/fairlock/lockbench"
	"github.com/redis/rueidis"
)

// bareName names the measurements of fairlock's scripts sent without the
// lock package (bareScripts) in the report.
const bareName = "fairlock scripts, bare"

// bareScripts is fairlock's own acquire and unlock scripts - the same Lua,
// byte for byte, as the lock package runs - sent by a bare
// rueidis client with the defaults fairlock/rueidis has, with no lock
// library around them: no owner state, no watchdog, no retries, no
// timers, no wake-ups. What a pair of them costs bounds what the library
// can reach with those scripts; the difference to fairlock/rueidis is the
// library's own client path.
//
// Acquire runs in "once" mode (TryLock without a wait: it never queues),
// again at once while the lock is held by another worker, so that a
// collision costs script calls but no queue, subscription or hand-over.
// The scripts are read from dir (lock/internal/wire/scripts) and put
// together as lock/internal/wire/scripts.go does; openBareScripts checks
// the result against the lock package's digests.
type bareScripts struct {
	client          rueidis.Client
	acquire, unlock *rueidis.Lua
	id              string // owner fields are id:n
	owners, reqs    atomic.Int64
}

// openBareScripts reads the scripts in dir and opens the client.
func openBareScripts(addr, dir string) (*bareScripts, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		return string(b), err
	}
	parts := map[string]string{}
	for _, n := range []string{"base.lua", "acquire_fast.lua", "acquire.lua", "unlock_fast.lua", "unlock.lua", "prelude.lua"} {
		s, err := read(n)
		if err != nil {
			return nil, fmt.Errorf("%s: the scripts of lock/internal/wire (-scripts): %w", bareName, err)
		}
		parts[n] = s
	}
	compose := func(fast, body string) string {
		return parts["base.lua"] + "\n" + parts[fast] + "\n" + parts["prelude.lua"] + "\n" + parts[body]
	}
	acq, unl := compose("acquire_fast.lua", "acquire.lua"), compose("unlock_fast.lua", "unlock.lua")
	// The lock package's digests (digests.go, checked against its own
	// composition by TestScriptDigests) must be these scripts' SHA-1s.
	digests, err := read("../digests.go")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bareName, err)
	}
	for name, src := range map[string]string{"acquire": acq, "unlock": unl} {
		m := regexp.MustCompile(`"` + name + `":\s*"([0-9a-f]{40})"`).FindStringSubmatch(digests)
		if m == nil || m[1] != sha1Hex(src) {
			return nil, fmt.Errorf("%s: the %s script put together from %s is not the one the lock package runs (digests.go)", bareName, name, dir)
		}
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	return &bareScripts{
		client:  c,
		acquire: rueidis.NewLuaScript(acq),
		unlock:  rueidis.NewLuaScript(unl),
		id:      "bare-" + hex.EncodeToString(raw[:]),
	}, nil
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

func (s *bareScripts) close() { s.client.Close() }

// locker returns a Locker of the lock called name (fairlock's key layout,
// no key prefix), as one owner of its own.
func (s *bareScripts) locker(name string) lockbench.Locker {
	tag := "{" + name + "}"
	keys := []string{name, "redisson_lock_queue:" + tag, "redisson_lock_timeout:" + tag, "fairlock_lock_alive:" + tag, "redisson_lock_token:" + tag}
	channel := "redisson_lock__channel:" + tag
	owner := s.id + ":" + strconv.FormatInt(s.owners.Add(1), 10)
	latch := "redisson_unlock_latch:" + tag + ":"
	var token string
	return lockbench.LockerFuncs{
		LockFunc: func(ctx context.Context) (int64, error) {
			// KEYS and ARGV as wire.Acquire: owner, lease, waiter timeout,
			// mode, channel prefix, publish, max hint, slack, view token,
			// view count, hold lease, retry, spent token, token counter
			// lifetime (the lease and a second).
			args := []string{owner, "30000", "5000", "once", channel, "publish", "1666", "300000", "0", "0", "0", "0", "0", "31000"}
			for ctx.Err() == nil {
				res := s.acquire.Exec(ctx, s.client, keys, args)
				if t, err := res.AsInt64(); err == nil && t > 0 {
					// A new hold: its token alone.
					token = strconv.FormatInt(t, 10)
					return t, nil
				}
				v, err := res.AsIntSlice()
				switch {
				case err != nil:
					return 0, err
				case len(v) == 3 && v[0] == 0:
					continue // held: once more
				}
				return 0, fmt.Errorf("%s: acquire replied %v", bareName, v)
			}
			return 0, ctx.Err()
		},
		UnlockFunc: func(ctx context.Context) error {
			// KEYS as wire.Unlock (the five, then the latch); ARGV: owner,
			// lease, channel prefix, publish, latch ms, view token, view
			// count, retry.
			req := fmt.Sprintf("%032x", s.reqs.Add(1))
			left, err := s.unlock.Exec(ctx, s.client, append(keys[:5:5], latch+req), []string{owner, "30000", channel, "publish", "3000", token, "1", "0"}).AsInt64()
			if err == nil && left != 0 {
				err = fmt.Errorf("%s: unlock replied %d", bareName, left)
			}
			return err
		},
	}
}
