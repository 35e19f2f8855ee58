package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fairlock/fairlock/lock"
	"github.com/spf13/cobra"
)

// The admin commands change a lock whoever holds it. Each shows the lock's
// state, asks for a confirmation on the terminal unless --yes, then acts
// through package lock, which wakes the next waiter as the API does.

// adminAction is one admin command: what it says and what it does.
type adminAction struct {
	name, short, doc string
	// skip returns why there is nothing to do for the lock in this state
	// ("" when there is something): the command then says so, asks
	// nothing and exits 0.
	skip func(rep inspectReport) string
	// question is the confirmation asked, without the [y/N].
	question func(rep inspectReport) string
	// act changes the lock and returns what happened, for people.
	act func(ctx context.Context, c *lock.Client, m *lock.Mutex, rep inspectReport) (string, error)
}

// adminConfig is an admin command's flags.
type adminConfig struct {
	conn connFlags
	name string
	yes  bool
}

// adminCommand is the command line of one admin action. do runs the parsed
// configuration; nil runs the action.
func adminCommand(e env, a adminAction, do func(context.Context, adminConfig) error) *cobra.Command {
	if do == nil {
		do = func(ctx context.Context, cfg adminConfig) error { return cfg.run(ctx, e, a) }
	}
	var cfg adminConfig
	cmd := &cobra.Command{
		Use:   a.name + " [flags] NAME",
		Short: a.short,
		Long: a.doc + `

Asks for a confirmation on the terminal first ("y" or "yes"); --yes confirms beforehand,
and is required when standard input is not a terminal. Exit code 1 when not confirmed.`,
		Args: oneName,
		RunE: func(c *cobra.Command, args []string) error {
			cfg.name = args[0]
			return do(c.Context(), cfg)
		},
	}
	cfg.conn.register(cmd, false, backendRueidis)
	cmd.Flags().BoolVarP(&cfg.yes, "yes", "y", false, "do not ask for a confirmation")
	return cmd
}

func forceUnlockCommand(e env, do func(context.Context, adminConfig) error) *cobra.Command {
	return adminCommand(e, adminAction{
		name:  "force-unlock",
		short: "release a lock whoever holds it; the next waiter gets it",
		doc: `
Releases lock NAME whoever holds it (Mutex.ForceUnlock, as Redisson's forceUnlock): a
fairlock holder's Hold ends within about a network delay (ErrLockLost), and the first
waiter in the queue is woken and takes the lock. Waiters keep their places.`,
		skip: func(rep inspectReport) string {
			if !rep.Locked {
				return fmt.Sprintf("lock %q is not held: nothing to force-unlock", rep.Name)
			}
			return ""
		},
		question: func(rep inspectReport) string {
			next := "nobody waits"
			if rep.QueueLength > 0 {
				next = "the first of the " + plural(rep.QueueLength, "waiter") + " gets it"
			}
			return fmt.Sprintf("Force-unlock %q? Its holder loses it and %s.", rep.Name, next)
		},
		act: func(ctx context.Context, _ *lock.Client, m *lock.Mutex, rep inspectReport) (string, error) {
			released, err := m.ForceUnlock(ctx)
			switch {
			case err != nil:
				return "", err
			case !released:
				return fmt.Sprintf("lock %q was free by the time of the force-unlock: nothing released", rep.Name), nil
			}
			return fmt.Sprintf("force-unlocked %q; the next waiter, if any, was woken", rep.Name), nil
		},
	}, do)
}

func deleteCommand(e env, do func(context.Context, adminConfig) error) *cobra.Command {
	return adminCommand(e, adminAction{
		name:  "delete",
		short: "delete a lock's hash, queue and timeouts; the first waiter gets it",
		doc: `
Deletes the state of lock NAME (Mutex.Delete, as Redisson's delete): the lock hash, the
queue and the waiters' timeouts. A fairlock holder's Hold ends within about a network delay
(ErrLockLost); the head waiter is woken and takes the lock, the other waiters queue again
at their next heartbeat. The fencing counter is kept, so tokens never go backwards.`,
		skip: func(rep inspectReport) string {
			if !rep.Exists {
				return fmt.Sprintf("no keys for %q on this server: nothing to delete", rep.Key)
			}
			if !rep.Locked && rep.QueueLength == 0 {
				return fmt.Sprintf("lock %q is free and nobody waits: nothing to delete (the fencing counter stays)", rep.Name)
			}
			return ""
		},
		question: func(rep inspectReport) string {
			return fmt.Sprintf("Delete lock %q (the hash, a queue of %s and their timeouts)?", rep.Name, plural(rep.QueueLength, "waiter"))
		},
		act: func(ctx context.Context, _ *lock.Client, m *lock.Mutex, rep inspectReport) (string, error) {
			existed, err := m.Delete(ctx)
			switch {
			case err != nil:
				return "", err
			case !existed:
				return fmt.Sprintf("lock %q had nothing left to delete", rep.Name), nil
			}
			return fmt.Sprintf("deleted %q; the first waiter, if any, was woken", rep.Name), nil
		},
	}, do)
}

func pruneWaitersCommand(e env, do func(context.Context, adminConfig) error) *cobra.Command {
	return adminCommand(e, adminAction{
		name:  "prune-waiters",
		short: "drop a lock's dead waiters; the new head is woken",
		doc: `
Drops the dead waiters of lock NAME (Client.PruneWaiters): queued owners whose deadline
has passed - a fairlock waiter that stopped heartbeating for longer than its waiter
timeout, a Redisson waiter past its Redisson deadline. Live waiters keep their places;
when the head changes, the new head is woken, and takes the lock if it is free. Locks in
use drop a dead head by themselves within the waiter timeout: this is for the dead ones
behind it, or a lock nobody is using. inspect marks the dead ones "dead?".`,
		skip: func(rep inspectReport) string {
			if rep.QueueLength == 0 {
				return fmt.Sprintf("nobody waits for %q: nothing to prune", rep.Name)
			}
			if deadShown(rep) == 0 && rep.QueueLength == len(rep.Queue) {
				return fmt.Sprintf("no dead waiter among the %s of %q: nothing to prune", plural(rep.QueueLength, "waiter"), rep.Name)
			}
			return ""
		},
		question: func(rep inspectReport) string {
			dead := plural(deadShown(rep), "dead waiter")
			if rep.QueueLength > len(rep.Queue) {
				dead = fmt.Sprintf("%s among the first %d listed, maybe more behind them", dead, len(rep.Queue))
			}
			return fmt.Sprintf("Drop the dead waiters of %q (%s waiting, %s)?", rep.Name, fmtInt(int64(rep.QueueLength)), dead)
		},
		act: func(ctx context.Context, c *lock.Client, _ *lock.Mutex, rep inspectReport) (string, error) {
			n, err := c.PruneWaiters(ctx, rep.Name)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("dropped %s of %q", plural(n, "dead waiter"), rep.Name), nil
		},
	}, do)
}

// deadShown returns how many of the waiters listed in rep look dead.
func deadShown(rep inspectReport) int {
	n := 0
	for _, w := range rep.Queue {
		if w.Dead {
			n++
		}
	}
	return n
}

// adminListed is how many waiters an admin command lists before its
// question.
const adminListed = 20

// run shows the lock, asks, and acts. Messages for people go to stderr,
// what happened to stdout.
func (cfg adminConfig) run(ctx context.Context, e env, a adminAction) error {
	lc, err := cfg.conn.openLock(e, cfg.name)
	if err != nil {
		return err
	}
	defer lc.Close()
	ep, c, m := lc.ep, lc.client, lc.m
	rep, err := inspectOnce(ctx, ep, m, adminListed)
	if err != nil {
		return err
	}
	if why := a.skip(rep); why != "" {
		fmt.Fprintln(e.stdout, why)
		return nil
	}
	if !cfg.yes {
		if !e.interactive {
			return usageError("%s needs a confirmation and standard input is not a terminal: add --yes to confirm", a.name)
		}
		printInspect(e.stderr, rep)
		if err := confirm(ctx, e, a.question(rep)); err != nil {
			return err
		}
	}
	done, err := a.act(ctx, c, m, rep)
	if err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, done)
	return nil
}

// errNotConfirmed is the answer to a confirmation that was not "y" or
// "yes".
var errNotConfirmed = errors.New("not confirmed: nothing changed")

// confirm asks question on stderr and returns nil when the answer on stdin
// is "y" or "yes" (in any case).
func confirm(ctx context.Context, e env, question string) error {
	fmt.Fprintf(e.stderr, "%s [y/N] ", question)
	answer := make(chan string, 1)
	go func() { // ends when stdin gives a line or ends; a process exit ends it too
		line, err := bufio.NewReader(e.stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			line = ""
		}
		answer <- line
	}()
	select {
	case line := <-answer:
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return nil
		}
		return errNotConfirmed
	case <-ctx.Done():
		fmt.Fprintln(e.stderr)
		return ctx.Err()
	}
}

// plural returns "1 waiter" or "n waiters".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
