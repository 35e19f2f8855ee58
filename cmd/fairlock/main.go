// Command fairlock shows, inspects and measures fair locks on Redis.
//
// Usage:
//
//	fairlock demo    [flags]        watch N workers share one lock in FIFO order
//	fairlock inspect [flags] NAME   print a lock's holder, lease, token and queue
//	fairlock bench   [flags]        measure latency, throughput and fairness
//	fairlock help    [command]      print help
//
// Every command connects to the server given by --addr, else by the
// REDIS_URL environment variable; demo and bench start an embedded
// Redis-compatible server (miniredis) in-process when neither is set.
// --addr takes "host:port" or a URL: redis://[user:password@]host[:port][/db],
// rediss:// for TLS, unix:///path/to/socket.
//
// Exit codes: 0 success; 1 the command failed or found a problem (a FIFO
// violation, a lease that did not expire); 2 bad flags, arguments or URL;
// 3 the server cannot be reached; 130 interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	exitOK          = 0   // success
	exitFailure     = 1   // the command failed or found a problem
	exitUsage       = 2   // bad flags, arguments or URL
	exitUnreachable = 3   // the server cannot be reached
	exitInterrupted = 130 // SIGINT or SIGTERM (128 + 2, as shells report it)
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program name) and returns the
// exit code. It is main without the process: tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return env{stdout: stdout, stderr: stderr, getenv: os.Getenv}.run(ctx, args)
}

// env is what a command may touch outside its arguments.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// command is one subcommand.
type command struct {
	name    string
	args    string // positional arguments, for the synopsis
	summary string // one line, for the command list
	doc     string // paragraphs printed by --help above the flags
	// run parses args and runs the command.
	run func(ctx context.Context, e env, args []string) error
}

func commands() []command {
	return []command{demoCommand(), inspectCommand(), benchCommand()}
}

func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func (e env) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		e.usage(e.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		e.usage(e.stdout)
		return exitOK
	case "help":
		if len(args) == 1 {
			e.usage(e.stdout)
			return exitOK
		}
		c, ok := findCommand(args[1])
		if !ok {
			fmt.Fprintf(e.stderr, "fairlock help: unknown command %q\nRun 'fairlock --help' for the list of commands.\n", args[1])
			return exitUsage
		}
		name, args = c.name, []string{"--help"}
	default:
		args = args[1:]
	}
	c, ok := findCommand(name)
	if !ok {
		fmt.Fprintf(e.stderr, "fairlock: unknown command %q\nRun 'fairlock --help' for the list of commands.\n", name)
		return exitUsage
	}
	err := c.run(ctx, e, args)
	return e.report(ctx, c.name, err)
}

// report prints err, if any, and returns the exit code for it.
func (e env) report(ctx context.Context, cmd string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	code := exitFailure
	var xe *exitError
	if errors.As(err, &xe) {
		code = xe.code
	}
	if code == exitFailure && ctx.Err() != nil {
		code = exitInterrupted
		err = fmt.Errorf("interrupted: %w", err)
	}
	fmt.Fprintf(e.stderr, "fairlock %s: %v\n", cmd, err)
	if code == exitUsage {
		fmt.Fprintf(e.stderr, "Run 'fairlock %s --help' for usage.\n", cmd)
	}
	return code
}

func (e env) usage(w io.Writer) {
	fmt.Fprint(w, `fairlock - a fair (FIFO), reentrant distributed lock on Redis, compatible with Redisson's fair lock.

Usage:
  fairlock <command> [flags] [arguments]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `  help     print help for a command

Connection (every command):
  --addr is "host:port" or a URL: redis://[user:password@]host[:port][/db], rediss:// (TLS),
  unix:///path. Without --addr the REDIS_URL environment variable is used; without either,
  demo and bench start an embedded Redis-compatible server (miniredis) in-process.

Exit codes:
  0 success, 1 failure or a problem found (FIFO violation), 2 bad flags, arguments or URL,
  3 server unreachable, 130 interrupted.

Run 'fairlock <command> --help' for a command's flags and their defaults.
`)
}

// exitError is an error with its own exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError reports bad flags, arguments or URLs (exit code 2).
func usageError(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// unreachableError reports a server that cannot be reached (exit code 3).
func unreachableError(err error) error {
	return &exitError{code: exitUnreachable, err: err}
}
