package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Flags are parsed by spf13/pflag through cobra: GNU style (--name value or
// --name=value), flags before or after the arguments, "--" ends the flags.
// This file holds the flag types the commands share and the wording of
// flag errors.

// durationValue is a time.Duration flag that says what is wrong with a
// value without a unit ("30" instead of "30s"), which time.ParseDuration
// reports only as "missing unit".
type durationValue time.Duration

func newDuration(fs *pflag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var((*durationValue)(p), name, usage)
}

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, numErr := strconv.ParseFloat(s, 64); numErr == nil {
			return fmt.Errorf("a duration needs a unit: %ss, %sms or %sm, for example", s, s, s)
		}
		return fmt.Errorf("not a duration (want a number and a unit: 500ms, 30s, 2m)")
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return time.Duration(*d).String() }
func (d *durationValue) Type() string   { return "duration" }

// Client libraries --backend accepts, in the order of the help.
const (
	backendRueidis = "rueidis"
	backendValkey  = "valkey"
	backendGoRedis = "goredis"
)

var backendNames = []string{backendRueidis, backendValkey, backendGoRedis}

// backendChoices is the list of --backend values for messages.
var backendChoices = strings.Join(backendNames[:len(backendNames)-1], ", ") + " or " + backendNames[len(backendNames)-1]

// checkBackend reports whether name is a known client library.
func checkBackend(name string) error {
	if slices.Contains(backendNames, name) {
		return nil
	}
	return usageError("unknown --backend %q (want %s)", name, backendChoices)
}

// backendsValue is --backend: one client library, or with many a
// comma-separated list of them (bench measures each).
type backendsValue struct {
	names []string
	many  bool
}

func (b *backendsValue) Set(s string) error {
	var names []string
	for n := range strings.SplitSeq(s, ",") {
		n = strings.TrimSpace(n)
		if !slices.Contains(backendNames, n) {
			return fmt.Errorf("unknown client library %q (want %s)", n, backendChoices)
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) > 1 && !b.many {
		return fmt.Errorf("one client library at a time (want %s)", backendChoices)
	}
	b.names = names
	return nil
}

func (b *backendsValue) String() string { return strings.Join(b.names, ",") }
func (b *backendsValue) Type() string   { return "library" }

// connFlags are the connection flags every command that talks to a server
// has.
type connFlags struct {
	addr        string        // --addr; "" falls back to REDIS_URL
	backends    backendsValue // --backend
	prefix      string        // --prefix, the lock key prefix
	dialTimeout time.Duration // --dial-timeout
}

// backend is the one client library of a command that takes one.
func (c *connFlags) backend() string { return c.backends.names[0] }

// register adds the connection flags to cmd. defaults are --backend's
// default; many lets --backend take a list.
func (c *connFlags) register(cmd *cobra.Command, many bool, defaults ...string) {
	fs := cmd.Flags()
	fs.StringVar(&c.addr, "addr", "",
		"Redis `address`: host:port, or a redis://, rediss:// or unix:// URL\n(default: $REDIS_URL)")
	c.backends = backendsValue{names: defaults, many: many}
	usage := "client `library`: " + backendChoices
	if many {
		usage = "client `libraries` to measure, comma-separated: " + strings.Join(backendNames, ", ")
	}
	fs.Var(&c.backends, "backend", usage)
	_ = cmd.RegisterFlagCompletionFunc("backend", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return backendNames, cobra.ShellCompDirectiveNoFileComp
	})
	fs.StringVar(&c.prefix, "prefix", "",
		"key `prefix` in front of lock names, as a Redisson NameMapper would add")
	newDuration(fs, &c.dialTimeout, "dial-timeout", 5*time.Second,
		"give up connecting to the server after this long")
}

// flagError words a flag parsing error from pflag and makes it a usage
// error (exit code 2).
func flagError(_ *cobra.Command, err error) error {
	var invalid *pflag.InvalidValueError
	var missing *pflag.NotExistError
	switch {
	case errors.As(err, &invalid):
		err = fmt.Errorf("invalid value %q for --%s: %w", invalid.GetValue(), invalid.GetFlag().Name, invalid.Unwrap())
	case errors.As(err, &missing):
		switch short := missing.GetSpecifiedShortnames(); {
		case len(short) > 1:
			// "-addr": Go's flag package took one dash, pflag does not.
			err = fmt.Errorf("unknown flag -%s (long flags take two dashes: --%s)", short, short)
		case short != "":
			err = fmt.Errorf("unknown flag -%s", short)
		default:
			err = fmt.Errorf("unknown flag --%s", missing.GetSpecifiedName())
		}
	}
	return usageError("%v", err)
}
