// Command fairlock shows, inspects, administers and measures fair locks on
// Redis.
//
// Usage:
//
//	fairlock demo    [flags]             watch N workers share one lock in FIFO order
//	fairlock inspect [flags] NAME        print a lock's holder, lease, token and queue
//	fairlock force-unlock [flags] NAME   release a lock whoever holds it
//	fairlock delete  [flags] NAME        delete a lock's hash, queue and timeouts
//	fairlock prune-waiters [flags] NAME  drop a lock's dead waiters
//	fairlock bench   [flags]             measure latency, throughput and fairness
//	fairlock version                     print the version (also --version)
//	fairlock completion SHELL            print a shell completion script
//	fairlock help    [command]           print help
//
// Every command connects to the server given by --addr, else by the
// REDIS_URL environment variable; demo and bench start an embedded
// Redis-compatible server (miniredis) in-process when neither is set.
// --addr takes "host:port" or a URL: redis://[user:password@]host[:port][/db],
// rediss:// for TLS, unix:///path/to/socket.
//
// Exit codes: 0 success; 1 the command failed or found a problem (a FIFO
// violation, a lease that did not expire, a confirmation declined); 2 bad
// flags, arguments or URL; 3 the server cannot be reached or does not speak
// RESP; 130 interrupted (SIGINT or SIGTERM, including the end of
// inspect --watch).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
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
	// After the first signal the default handling is back, so a second
	// Ctrl-C ends a command that does not stop in time.
	context.AfterFunc(ctx, stop)
	e := env{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		interactive: isTerminal(os.Stdin),
	}
	if isTerminal(os.Stderr) {
		e.progressEvery = time.Second
	}
	code := e.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program name) and returns the
// exit code. It is main without the process: tests call it directly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return env{stdin: strings.NewReader(""), stdout: stdout, stderr: stderr, getenv: os.Getenv}.run(ctx, args)
}

// env is what a command may touch outside its arguments.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// interactive is true when stdin is a terminal: only then may a
	// command ask for a confirmation.
	interactive bool
	// progressEvery is how often bench reports progress on stderr; 0 (the
	// default, and when stderr is not a terminal): never.
	progressEvery time.Duration
}

func init() {
	cobra.EnableCommandSorting = false // the help lists commands as added
}

// rootCommand is the command line: every command, with the help and flag
// error handling they share.
func (e env) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:     "fairlock",
		Short:   "a fair (FIFO), reentrant distributed lock on Redis, compatible with Redisson's fair lock",
		Version: version().short(),
		// Without a command: the usage on stderr and exit code 2.
		RunE: func(c *cobra.Command, args []string) error {
			e.usage(e.stderr, c)
			return &exitError{code: exitUsage, err: errQuiet}
		},
		SilenceErrors: true, // report prints them
		SilenceUsage:  true,
	}
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetVersionTemplate("fairlock {{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	root.SetHelpFunc(func(c *cobra.Command, _ []string) { e.help(c.OutOrStdout(), c) })
	root.SetHelpCommand(e.helpCommand())
	root.AddCommand(
		demoCommand(e, nil),
		inspectCommand(e, nil),
		forceUnlockCommand(e, nil),
		deleteCommand(e, nil),
		pruneWaitersCommand(e, nil),
		benchCommand(e, nil),
		versionCommand(e),
	)
	// cobra's completion command, made now to word its summary as the
	// others are.
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil {
		c.Short = "print a shell completion script: bash, zsh, fish or powershell"
	}
	return root
}

func (e env) run(ctx context.Context, args []string) int {
	root := e.rootCommand()
	// Errors cobra returns before a command runs are about the command
	// line: exit code 2.
	ran := false
	root.PersistentPreRun = func(*cobra.Command, []string) { ran = true }
	root.SetArgs(append([]string{}, args...)) // never nil: cobra reads os.Args then
	cmd, err := root.ExecuteContextC(ctx)
	var xe *exitError
	if err != nil && !ran && !errors.As(err, &xe) {
		err = usageError("%v", err)
	}
	name := ""
	if cmd != nil && cmd.HasParent() {
		name = strings.TrimPrefix(cmd.CommandPath(), root.Name()+" ")
	}
	return e.report(ctx, name, err)
}

// errQuiet is an error whose exitError has already said what it had to.
var errQuiet = errors.New("")

// report prints err, if any, and returns the exit code for it. cmd is the
// command's name ("" for fairlock itself).
func (e env) report(ctx context.Context, cmd string, err error) int {
	if err == nil {
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
	if errors.Is(err, errQuiet) {
		return code
	}
	prog := "fairlock"
	if cmd != "" {
		prog += " " + cmd
	}
	fmt.Fprintf(e.stderr, "%s: %v\n", prog, err)
	if code == exitUsage {
		fmt.Fprintf(e.stderr, "Run '%s --help' for usage.\n", prog)
	}
	return code
}

// help prints a command's help: the synopsis, description and flags with
// their defaults; for fairlock itself, the command list and what all
// commands share.
func (e env) help(w io.Writer, c *cobra.Command) {
	if !c.HasParent() {
		e.usage(w, c)
		return
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.UseLine(), strings.TrimSpace(c.Long))
	if c.HasAvailableSubCommands() {
		fmt.Fprintln(w, "\nCommands:")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(w, "  %-12s %s\n", sub.Name(), sub.Short)
			}
		}
	}
	if fl := c.LocalFlags(); fl.HasAvailableFlags() {
		fmt.Fprintf(w, "\nFlags:\n%s", fl.FlagUsages())
	}
}

// usage prints the help of fairlock itself.
func (e env) usage(w io.Writer, root *cobra.Command) {
	fmt.Fprintf(w, `fairlock - %s.

Usage:
  fairlock <command> [flags] [arguments]

Commands:
`, root.Short)
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() || c.Name() == "help" {
			fmt.Fprintf(w, "  %-14s %s\n", c.Name(), c.Short)
		}
	}
	fmt.Fprint(w, `
Connection (every command that talks to a server):
  --addr is "host:port" or a URL: redis://[user:password@]host[:port][/db], rediss:// (TLS),
  unix:///path. Without --addr the REDIS_URL environment variable is used; without either,
  demo and bench start an embedded Redis-compatible server (miniredis) in-process.

Exit codes:
  0    success
  1    failure or a problem found (FIFO violation, lease not handed over, confirmation declined)
  2    bad flags, arguments or URL
  3    server unreachable, or not speaking the Redis protocol as asked (RESP, TLS or not)
  130  interrupted (SIGINT or SIGTERM; also how inspect --watch ends)

Run 'fairlock <command> --help' for a command's flags and their defaults,
'fairlock --version' for the version.
`)
}

// helpCommand is "fairlock help [command]": an unknown command is a usage
// error, as everywhere else.
func (e env) helpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "print help for a command",
		Long:  "Prints the help of a command, or of fairlock itself without one.",
		Args:  cobra.ArbitraryArgs,
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			var names []string
			for _, sub := range c.Root().Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err != nil || target == nil || len(rest) > 0 {
				return usageError("unknown command %q", strings.Join(args, " "))
			}
			e.help(c.OutOrStdout(), target)
			return nil
		},
	}
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

// oneName is a cobra.PositionalArgs that wants exactly one lock NAME.
func oneName(_ *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usageError("missing lock NAME")
	case len(args) > 1:
		return usageError("unexpected argument %q (one lock NAME at a time)", args[1])
	}
	return nil
}

// noArgs is a cobra.PositionalArgs that wants no arguments.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError("unexpected argument %q", args[0])
	}
	return nil
}

// parseOnly parses args with cmd, alone, as the command line would, for
// tests that want a command's configuration: cmd's run must only record it.
func parseOnly(e env, cmd *cobra.Command, args []string) error {
	cmd.SetArgs(append([]string{}, args...))
	cmd.SetIn(e.stdin)
	cmd.SetOut(e.stdout)
	cmd.SetErr(e.stderr)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetFlagErrorFunc(flagError)
	return cmd.Execute()
}
