package securitytest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
)

// securityDoc is the page the ACL recipe is read from, so that the recipe
// is tested as written.
const securityDoc = "../../docs/security.md"

// recipePassword is the password the recipe sets (">CHANGE-ME").
const recipePassword = "CHANGE-ME"

// recipe returns the ACL SETUSER lines of the code block after the
// "<!-- acl-recipe: name -->" marker in docs/security.md.
func recipe(t testing.TB, name string) []string {
	t.Helper()
	f, err := os.Open(securityDoc)
	if err != nil {
		t.Fatalf("the ACL recipe: %v", err)
	}
	defer f.Close()
	marker := "<!-- acl-recipe: " + name + " -->"
	var lines []string
	found, inBlock := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == marker:
			found = true
		case found && !inBlock && strings.HasPrefix(line, "```"):
			inBlock = true
		case inBlock && strings.HasPrefix(line, "```"):
			if len(lines) == 0 {
				t.Fatalf("%s: recipe %q has no ACL SETUSER line", securityDoc, name)
			}
			return lines
		case inBlock:
			if !strings.HasPrefix(line, "ACL SETUSER locker ") {
				t.Fatalf("%s: recipe %q: line %q is not ACL SETUSER locker ...", securityDoc, name, line)
			}
			lines = append(lines, line)
		}
	}
	t.Fatalf("%s: no code block after %s", securityDoc, marker)
	return nil
}

// applyRecipe creates the user "locker" on admin from the named recipe
// blocks, leaving out the rules in drop.
func applyRecipe(t testing.TB, admin *redistest.Server, drop []string, blocks ...string) {
	t.Helper()
	for _, b := range blocks {
		for _, line := range recipe(t, b) {
			args := []string{"ACL", "SETUSER", "locker"}
			for _, rule := range strings.Fields(strings.TrimPrefix(line, "ACL SETUSER locker ")) {
				if !slices.Contains(drop, rule) {
					args = append(args, rule)
				}
			}
			if reply := admin.Do(t, args...); reply != "OK" {
				t.Fatalf("%s: %v", line, reply)
			}
		}
	}
	for _, rule := range drop {
		if !slices.ContainsFunc(blocks, func(b string) bool {
			return slices.ContainsFunc(recipe(t, b), func(l string) bool { return slices.Contains(strings.Fields(l), rule) })
		}) {
			t.Fatalf("rule %q to leave out is not in the recipe %v", rule, blocks)
		}
	}
}

var lockerConn = func(addr string) conn { return conn{addr: addr, user: "locker", password: recipePassword} }

// TestRecipeCoversScripts checks that the recipe's commands include every
// command the lock scripts run (redis.call('cmd', ...)) and both publish
// commands (publish_to runs what the client names).
func TestRecipeCoversScripts(t *testing.T) {
	granted := map[string]bool{}
	for _, b := range []string{"commands", "sharded"} {
		for _, line := range recipe(t, b) {
			for _, rule := range strings.Fields(line) {
				if c, ok := strings.CutPrefix(rule, "+"); ok {
					granted[c] = true
				}
			}
		}
	}
	files, err := filepath.Glob("../../lock/internal/wire/scripts/*.lua")
	if err != nil || len(files) < 10 {
		t.Fatalf("the lock scripts: %v (%d files)", err, len(files))
	}
	call := regexp.MustCompile(`redis\.call\('([a-z]+)'`)
	seen := map[string]bool{"publish": true, "spublish": true}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			seen[m[1]] = true
		}
	}
	if len(seen) < 20 {
		t.Fatalf("found only %d commands in the scripts: %v", len(seen), seen)
	}
	for cmd := range seen {
		if !granted[cmd] {
			t.Errorf("the scripts run %s, which the recipe in %s does not grant", strings.ToUpper(cmd), securityDoc)
		}
	}
}

// TestACLRecipe runs the scenario on every adapter as the user the recipe
// in docs/security.md creates: with the default layout (lock "orders"),
// and with a key prefix together with sharded publish and cached reads.
// Nothing may be refused, not even a command whose failure the adapters or
// the lock would step around: ACL LOG stays empty.
func TestACLRecipe(t *testing.T) {
	layouts := []struct {
		name   string
		blocks []string
		opts   []lock.Option
	}{
		{"default", []string{"commands", "default"}, nil},
		{"prefix", []string{"commands", "prefix", "sharded", "cached"},
			[]lock.Option{lock.WithKeyPrefix("app:"), lock.WithPublish(lock.PublishBoth), lock.WithCachedReads(time.Minute)}},
	}
	for _, l := range layouts {
		for _, a := range adapters {
			t.Run(l.name+"/"+a.name, func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				applyRecipe(t, srv, nil, l.blocks...)
				scenario(t, a, lockerConn(srv.Addr()), srv, "orders", l.opts...)
				if refused := aclLog(t, srv); len(refused) > 0 {
					t.Fatalf("ACL LOG after the scenario as the recipe's user:\n%s", strings.Join(refused, "\n"))
				}
				// The recipe confines the user: a key and a channel outside
				// its patterns are refused.
				if _, ok := srv.Do(t, "ACL", "DRYRUN", "locker", "SET", "other", "x").(string); !ok {
					t.Fatalf("ACL DRYRUN failed")
				}
				for _, probe := range [][]string{{"SET", "other:key", "x"}, {"PUBLISH", "other-channel", "x"}, {"KEYS", "*"}, {"FLUSHALL"}} {
					if reply := srv.Do(t, append([]string{"ACL", "DRYRUN", "locker"}, probe...)...); reply == "OK" {
						t.Errorf("the recipe's user may run %q", probe)
					}
				}
			})
		}
	}
}

// commandStat returns a field of a command's INFO commandstats line, e.g.
// commandStat(srv, "evalsha", "rejected_calls").
func commandStat(t testing.TB, srv *redistest.Server, cmd, field string) string {
	t.Helper()
	info, _ := srv.Do(t, "INFO", "commandstats").(string)
	for line := range strings.SplitSeq(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":"); ok {
			for kv := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(kv, field+"="); ok {
					return v
				}
			}
		}
	}
	return "0"
}

// TestMissingPermission runs Lock as a user that lacks one part of the
// prefix recipe, on a free lock and on one another client holds:
//
//   - the script commands (+evalsha +eval) or a key pattern: the call fails
//     at once with the server's NOPERM error, after two refused requests
//     (the acquire, and the leave that undoes a failed one; no retry
//     loop), and nothing is written;
//   - the wake-up channel pattern: on a free lock the acquire asks first
//     and is refused at once (NOPERM naming publish), nothing written; on
//     a held lock SUBSCRIBE is refused, and a waiter's
//     Lock fails within 5 s with the server's NOPERM error naming the
//     channel; the refusal is not retried (at most 3 refused SUBSCRIBEs),
//     and the waiter leaves the queue, so nothing is left behind.
func TestMissingPermission(t *testing.T) {
	const free, contended = "free", "contended"
	cases := []struct {
		name    string
		drop    []string
		want    []string // in the error, each
		refused string   // the command refused once per call
	}{
		{"scripts", []string{"+evalsha", "+eval"}, []string{"NOPERM", "evalsha"}, "evalsha"},
		{"key pattern", []string{"~redisson_lock_queue:{app:*"}, []string{"NOPERM", "keys", "script acquire (EVALSHA)"}, "evalsha"},
	}
	for _, c := range cases {
		for _, a := range adapters {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				t.Parallel()
				srv := redistest.Start(t)
				applyRecipe(t, srv, c.drop, "commands", "prefix")
				opts := append(scenarioOpts, lock.WithKeyPrefix("app:"))
				m := newMutex(t, newClient(t, a, lockerConn(srv.Addr()), opts...), "orders")
				holder := newMutex(t, newClient(t, a, conn{addr: srv.Addr()}, opts...), "held")
				ctx, cancel := context.WithTimeout(context.Background(), within)
				defer cancel()
				if _, err := holder.Lock(ctx); err != nil {
					t.Fatalf("Lock as the default user: %v", err)
				}
				before := srv.Do(t, "KEYS", "*")
				for _, which := range []string{free, contended} {
					target := m
					if which == contended {
						target = newMutex(t, newClient(t, a, lockerConn(srv.Addr()), opts...), "held")
					}
					rejected := commandStat(t, srv, c.refused, "rejected_calls")
					start := time.Now()
					_, err := target.Lock(ctx)
					took := time.Since(start)
					t.Logf("%s: Lock on a %s lock: %v (after %v)", a.name, which, err, took.Round(time.Microsecond))
					if err == nil {
						t.Fatalf("Lock on a %s lock succeeded without %v", which, c.drop)
					}
					for _, w := range c.want {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("Lock on a %s lock: error %q does not name %q", which, err, w)
						}
					}
					if errors.Is(err, lock.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Lock on a %s lock: %v, want a final error, not a retried one", which, err)
					}
					if took > 2*time.Second {
						t.Errorf("Lock on a %s lock failed after %v, want at once", which, took)
					}
					// The acquire, and the leave that undoes an acquire
					// that failed (leave.lua): no retries.
					after := commandStat(t, srv, c.refused, "rejected_calls")
					if n := atoi(after) - atoi(rejected); n != 2 {
						t.Errorf("Lock on a %s lock: %d refused %s, want 2 (acquire and leave; no retries)", which, n, strings.ToUpper(c.refused))
					}
				}
				if after := srv.Do(t, "KEYS", "*"); !sameSet(before, after) {
					t.Fatalf("keys changed by the refused calls: before %v, after %v", before, after)
				}
			})
		}
	}

	for _, a := range adapters {
		t.Run("wake channel/"+a.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			applyRecipe(t, srv, []string{"&redisson_lock__channel:{app:*"}, "commands", "prefix")
			opts := []lock.Option{lock.WithKeyPrefix("app:"), lock.WithWaiterTimeout(3 * time.Second)}
			locker := newClient(t, a, lockerConn(srv.Addr()), opts...)
			m := newMutex(t, locker, "orders")
			holder := newMutex(t, newClient(t, a, conn{addr: srv.Addr()}, opts...), "orders")
			ctx, cancel := context.WithTimeout(context.Background(), within)
			defer cancel()
			// A free lock is refused too, at once and with nothing
			// written: the acquire that would take it asks first, as a
			// hold whose renewals are refused would be lost at the end of
			// its first lease.
			start := time.Now()
			_, err := newMutex(t, locker, "free").Lock(ctx)
			if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "publish") {
				t.Fatalf("Lock of a free lock without the wake-up channel: %v, want NOPERM naming publish", err)
			}
			if keys := srv.Do(t, "KEYS", "*free*"); len(keys.([]any)) != 0 {
				t.Fatalf("the refused Lock of a free lock wrote %v", keys)
			}
			t.Logf("%s: without the wake-up channel Lock of a free lock failed after %v", a.name, time.Since(start).Round(time.Microsecond))
			if _, err := holder.Lock(ctx); err != nil {
				t.Fatalf("Lock as the default user: %v", err)
			}
			// The waiter queues, cannot subscribe to its wake-up channel,
			// and gives up at once with the server's refusal, leaving the
			// queue.
			start = time.Now()
			_, err = m.Lock(ctx)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "redisson_lock__channel:{app:orders}") {
				t.Fatalf("Lock without the wake-up channel: %v, want an error naming NOPERM and the channel", err)
			}
			if took > 5*time.Second {
				t.Errorf("the refusal took %v to reach the caller", took)
			}
			if n := atoi(commandStat(t, srv, "subscribe", "rejected_calls")); n > 3 {
				t.Errorf("%d SUBSCRIBEs refused: a refusal must not be retried", n)
			}
			t.Logf("%s: without the wake-up channel Lock failed after %v: %v", a.name, took.Round(time.Millisecond), err)
			if err := holder.Unlock(ctx); err != nil {
				t.Fatalf("Unlock as the default user: %v", err)
			}
			if keys := srv.Do(t, "KEYS", "redisson_lock_queue:*"); len(keys.([]any)) != 0 {
				t.Fatalf("queue left behind: %v", keys)
			}
		})
	}
}

// TestPublishRefusedLeavesNothingHalfDone: Redis checks the channels a
// script publishes on only when it publishes, after the writes before;
// the lock's scripts ask first (redis.acl_check_cmd). So a holder whose
// user loses the wake-up channel pattern gets NOPERM from Unlock at once,
// and the lock stays as it was - still held, its waiter still queued, no
// grant written - and a ForceUnlock by a user that may not publish on the
// client channels is refused the same way. With the rights back, the same
// Unlock hands over.
func TestPublishRefusedLeavesNothingHalfDone(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			applyRecipe(t, srv, nil, "commands", "prefix")
			opts := []lock.Option{lock.WithKeyPrefix("app:")}
			holder := newMutex(t, newClient(t, a, lockerConn(srv.Addr()), opts...), "orders")
			waiter := newMutex(t, newClient(t, a, conn{addr: srv.Addr()}, opts...), "orders")
			ctx, cancel := context.WithTimeout(context.Background(), within)
			defer cancel()
			h, err := holder.Lock(ctx)
			if err != nil {
				t.Fatalf("Lock as the lock user: %v", err)
			}
			got := make(chan error, 1)
			go func() {
				_, err := waiter.Lock(ctx)
				got <- err
			}()
			redistest.Eventually(t, within, "the waiter to queue", func() bool {
				return srv.Do(t, "LLEN", "redisson_lock_queue:{app:orders}") == int64(1)
			})
			state := func() string {
				return fmt.Sprint(srv.Do(t, "HGETALL", "app:orders"), srv.Do(t, "LRANGE", "redisson_lock_queue:{app:orders}", "0", "-1"))
			}
			before := state()

			srv.Do(t, "ACL", "SETUSER", "locker", "resetchannels", "&fairlock_client:*")
			if _, err := newMutex(t, newClient(t, a, lockerConn(srv.Addr()), opts...), "orders").ForceUnlock(ctx); err == nil || !strings.Contains(err.Error(), "NOPERM") {
				t.Errorf("ForceUnlock without the wake-up channels: %v, want NOPERM", err)
			}
			start := time.Now()
			err = holder.Unlock(ctx)
			if err == nil || !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "publish") {
				t.Fatalf("Unlock without the wake-up channels: %v, want NOPERM naming publish", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("the refused Unlock took %v", took)
			}
			if after := state(); after != before {
				t.Fatalf("the refused Unlock changed the lock: before %s, after %s", before, after)
			}
			select {
			case err := <-got:
				t.Fatalf("the waiter returned while the lock was still held: %v", err)
			default:
			}
			// The failed Unlock ended the hold on the client's side (X13);
			// the lock frees itself with its lease, or here at once by an
			// admin with the rights.
			if h.Err() == nil {
				t.Errorf("the hold lasts after a failed Unlock")
			}
			if _, err := newMutex(t, newClient(t, a, conn{addr: srv.Addr()}, opts...), "orders").ForceUnlock(ctx); err != nil {
				t.Fatalf("ForceUnlock as the default user: %v", err)
			}
			if err := <-got; err != nil {
				t.Fatalf("the waiter after the force-unlock: %v", err)
			}
		})
	}
}

// TestMissingClientChannel: a user that may not subscribe to
// fairlock_client:* (where a client hears that its holds were
// force-unlocked, and of reconnects) gets the refusal, naming NOPERM and
// the channel, from its acquires - from the first one when NewClient's wait
// for its first SUBSCRIBE (at most a second) saw the refusal - and the
// SUBSCRIBE is not retried.
func TestMissingClientChannel(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			applyRecipe(t, srv, []string{"&fairlock_client:*"}, "commands", "prefix")
			opts := []lock.Option{lock.WithKeyPrefix("app:")}
			m := newMutex(t, newClient(t, a, lockerConn(srv.Addr()), opts...), "orders")
			ctx, cancel := context.WithTimeout(context.Background(), within)
			defer cancel()
			var err error
			redistest.Eventually(t, within, "an acquire refused with the client channel's NOPERM", func() bool {
				_, err = m.TryLock(ctx, 0)
				if err == nil {
					_ = m.Unlock(ctx)
				}
				return err != nil
			})
			if !strings.Contains(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "fairlock_client:") {
				t.Fatalf("acquire after the refusal: %v, want NOPERM naming the client channel", err)
			}
			if n := atoi(commandStat(t, srv, "subscribe", "rejected_calls")); n != 1 {
				t.Errorf("%d SUBSCRIBEs refused, want 1: a refusal is not retried", n)
			}
		})
	}
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			break
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// sameSet reports whether two KEYS replies hold the same keys.
func sameSet(a, b any) bool {
	as, _ := a.([]any)
	bs, _ := b.([]any)
	if len(as) != len(bs) {
		return false
	}
	for _, k := range as {
		if !slices.Contains(bs, k) {
			return false
		}
	}
	return true
}
