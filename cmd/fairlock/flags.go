package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// flagSet is a command's flag.FlagSet with GNU-style help: flags are shown
// as --name, --help prints to stdout, and flags may follow positional
// arguments ("fairlock inspect orders --watch").
type flagSet struct {
	*flag.FlagSet
	cmd command
}

func newFlagSet(c command) *flagSet {
	fs := flag.NewFlagSet("fairlock "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and help are printed by parse
	return &flagSet{FlagSet: fs, cmd: c}
}

// parse parses args, where flags and positional arguments may mix ("--"
// ends the flags), and returns the positional arguments. On -h or --help it
// prints the help to e.stdout and returns flag.ErrHelp; a bad flag is a
// usage error.
func (fs *flagSet) parse(e env, args []string) ([]string, error) {
	var positional []string
	for {
		err := fs.Parse(args)
		if err == flag.ErrHelp {
			fs.printHelp(e.stdout)
			return nil, flag.ErrHelp
		}
		if err != nil {
			return nil, usageError("%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		// flag stops at the first non-flag argument, or after "--".
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// printHelp prints the command's synopsis, description and flags with
// their defaults.
func (fs *flagSet) printHelp(w io.Writer) {
	c := fs.cmd
	synopsis := "fairlock " + c.name + " [flags]"
	if c.args != "" {
		synopsis += " " + c.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n\nFlags:\n", synopsis, strings.TrimSpace(c.doc))
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		usage = strings.ReplaceAll(usage, "\n", "\n      \t")
		fmt.Fprintf(w, "%s\n      \t%s", line, usage)
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" {
			fmt.Fprintf(w, " (default %s)", def)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprintln(w, "  --help\n      \tprint this help")
}

// connFlags are the connection flags every command has.
type connFlags struct {
	addr        string        // --addr; "" falls back to REDIS_URL
	backend     string        // --backend
	prefix      string        // --prefix, the lock key prefix
	dialTimeout time.Duration // --dial-timeout
}

// register adds the connection flags to fs. backendDefault and backendUsage
// describe --backend, which bench accepts as a list.
func (c *connFlags) register(fs *flagSet, backendDefault, backendUsage string) {
	fs.StringVar(&c.addr, "addr", "",
		"Redis `address`: host:port, or a redis://, rediss:// or unix:// URL\n(default: $REDIS_URL)")
	fs.StringVar(&c.backend, "backend", backendDefault, backendUsage)
	fs.StringVar(&c.prefix, "prefix", "",
		"key `prefix` in front of lock names, as a Redisson NameMapper would add")
	fs.DurationVar(&c.dialTimeout, "dial-timeout", 5*time.Second,
		"give up connecting to the server after this long")
}

// Client libraries --backend accepts.
const (
	backendRueidis = "rueidis"
	backendValkey  = "valkey"
)

// checkBackend reports whether name is a known client library.
func checkBackend(name string) error {
	if name == backendRueidis || name == backendValkey {
		return nil
	}
	return usageError("unknown --backend %q (want %s or %s)", name, backendRueidis, backendValkey)
}
