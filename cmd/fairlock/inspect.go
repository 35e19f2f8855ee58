package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/inspect"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

const inspectDoc = `
Prints the state of lock NAME, read atomically on the server: the holder (client id and
owner id, as in the owner field "<clientID>:<ownerID>"), its hold count, the lease left,
the latest fencing token, and the queue in order with each waiter's deadline. Waiters that
look dead - deadline passed, or no deadline at all - are flagged with a warning. A name
with no keys at all on the server (no hash, queue, timeouts or fencing counter) is said to
be so: check the name and --prefix.

Works on locks taken by Redisson's getFairLock(NAME) too: the keyspace is the same
(owner fields are "<uuid>:<threadId>"; Redisson issues no fencing tokens).

--watch redraws the state every --interval until interrupted (exit code 130) or until
--count refreshes (exit code 0).`

// inspectCommand is "fairlock inspect". do runs the parsed configuration;
// nil runs inspect.
func inspectCommand(e env, do func(context.Context, inspectConfig) error) *cobra.Command {
	if do == nil {
		do = func(ctx context.Context, cfg inspectConfig) error { return cfg.run(ctx, e) }
	}
	var cfg inspectConfig
	cmd := &cobra.Command{
		Use:   "inspect [flags] NAME",
		Short: "print a lock's holder, lease, fencing token and queue",
		Long:  inspectDoc,
		Args:  oneName,
		RunE: func(c *cobra.Command, args []string) error {
			cfg.name = args[0]
			if err := cfg.check(c); err != nil {
				return err
			}
			return do(c.Context(), cfg)
		},
	}
	cfg.conn.register(cmd, false, backendRueidis)
	fs := cmd.Flags()
	fs.IntVar(&cfg.limit, "limit", 100, "list at most this many waiters")
	fs.BoolVar(&cfg.watch, "watch", false, "refresh every --interval until interrupted")
	newDuration(fs, &cfg.interval, "interval", time.Second, "refresh interval of --watch")
	fs.IntVar(&cfg.count, "count", 0, "with --watch, stop after this many refreshes (0: never)")
	fs.BoolVar(&cfg.json, "json", false, "print JSON (one object per line with --watch)")
	return cmd
}

// inspectConfig is the inspect command's flags.
type inspectConfig struct {
	conn     connFlags
	name     string
	limit    int
	watch    bool
	interval time.Duration
	count    int
	json     bool
}

// parseInspect parses inspect's command line without running it.
func parseInspect(e env, args []string) (cfg inspectConfig, err error) {
	err = parseOnly(e, inspectCommand(e, func(_ context.Context, c inspectConfig) error { cfg = c; return nil }), args)
	return cfg, err
}

// check checks the values of the flags.
func (cfg inspectConfig) check(c *cobra.Command) error {
	switch {
	case cfg.limit < 0:
		return usageError("--limit must not be negative, got %d", cfg.limit)
	case cfg.interval < 10*time.Millisecond:
		return usageError("--interval must be at least 10ms, got %v", cfg.interval)
	case cfg.count < 0:
		return usageError("--count must not be negative, got %d", cfg.count)
	case !cfg.watch && c.Flags().Changed("count"):
		return usageError("--count only counts the refreshes of --watch: add --watch, or drop --count")
	}
	return nil
}

// inspectReport is one snapshot of a lock, as printed.
type inspectReport struct {
	Name        string    `json:"name"`
	Key         string    `json:"key"`
	ServerTime  time.Time `json:"server_time"`
	Locked      bool      `json:"locked"`
	Holders     []holder  `json:"holders"`
	LeaseLeft   float64   `json:"lease_left_ms"` // 0: free; -1: no expiry
	Token       int64     `json:"token"`         // latest fencing token; 0: none issued
	QueueLength int       `json:"queue_length"`
	Queue       []waiter  `json:"queue"` // head first, at most --limit
	Warnings    []string  `json:"warnings"`
	// Exists is false when the server has none of the lock's keys: no
	// hash, queue, timeouts, liveness or fencing counter.
	Exists bool `json:"exists"`

	leaseLeft time.Duration
}

// holder is one owner in the lock hash.
type holder struct {
	Owner    string `json:"owner"`     // the field, "<clientID>:<ownerID>"
	ClientID string `json:"client_id"` // "" when the field has another form
	OwnerID  int64  `json:"owner_id"`
	Count    int    `json:"count"`
	clientInfo
}

// clientInfo is who an owner's client is, as far as Inspect can tell.
type clientInfo struct {
	// Description is what the client says of itself (lock.WithDescription):
	// host, pid and name; null when it says nothing.
	Description *inspect.Description `json:"description"`
	// Kind is "fairlock", "redisson" or "unknown" (inspect.Kind).
	Kind string `json:"kind"`
}

func newClientInfo(d *inspect.Description, k inspect.Kind) clientInfo {
	if k == inspect.KindUnknown {
		k = "unknown"
	}
	return clientInfo{Description: d, Kind: string(k)}
}

// String says who the client is for the table: "orders-api (host web-1,
// pid 4242)", "Redisson client", or "" when nothing is known.
func (c clientInfo) String() string {
	if d := c.Description; d != nil {
		var facts []string
		if d.Host != "" {
			facts = append(facts, "host "+d.Host)
		}
		if d.PID != 0 {
			facts = append(facts, fmt.Sprintf("pid %d", d.PID))
		}
		who := d.Name
		if who == "" {
			who = "fairlock client"
		}
		if len(facts) > 0 {
			who += " (" + strings.Join(facts, ", ") + ")"
		}
		return who
	}
	switch inspect.Kind(c.Kind) {
	case inspect.KindRedisson:
		return "Redisson client"
	case inspect.KindFairlock:
		return "fairlock client, no description"
	}
	return ""
}

// waiter is one queued owner.
type waiter struct {
	Position   int        `json:"position"`
	Owner      string     `json:"owner"`
	ClientID   string     `json:"client_id"`
	OwnerID    int64      `json:"owner_id"`
	Deadline   *time.Time `json:"deadline"`       // null: no entry in the timeout zset
	DeadlineIn float64    `json:"deadline_in_ms"` // from the server time; negative when passed
	Dead       bool       `json:"dead"`           // looks dead: no deadline, or it has passed
	clientInfo

	deadlineIn time.Duration
}

func (cfg inspectConfig) run(ctx context.Context, e env) error {
	lc, err := cfg.conn.openLock(e, cfg.name)
	if err != nil {
		return err
	}
	defer lc.Close()
	ep, m := lc.ep, lc.m

	clear := cfg.watch && !cfg.json && isTerminal(e.stdout)
	show := func(n int, rep inspectReport) error {
		switch {
		case cfg.json && cfg.watch:
			return json.NewEncoder(e.stdout).Encode(rep) // one object per line
		case cfg.json:
			return writeJSON(e.stdout, rep)
		case clear:
			fmt.Fprint(e.stdout, "\x1b[H\x1b[2J") // redraw in place
		case n > 1:
			fmt.Fprintln(e.stdout)
		}
		printInspect(e.stdout, rep)
		return nil
	}
	// --watch ends on a signal with the exit code the help promises for
	// an interrupt, and without a message: that is how it is stopped.
	interrupted := &exitError{code: exitInterrupted, err: errQuiet}
	t := time.NewTicker(cfg.interval)
	defer t.Stop()
	for n := 1; ; n++ {
		rep, err := inspectOnce(ctx, ep, m, cfg.limit)
		switch {
		case err == nil:
			if err := show(n, rep); err != nil {
				return err
			}
		case !cfg.watch:
			return err
		case ctx.Err() != nil:
			return interrupted
		default:
			// Keep watching: the server may be restarting.
			fmt.Fprintf(e.stderr, "fairlock inspect: %s: %v\n", time.Now().Format("15:04:05.000"), err)
		}
		if !cfg.watch || (cfg.count > 0 && n >= cfg.count) {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return interrupted
		}
	}
}

// inspectOnce reads the lock's state and, when it looks free and unused,
// whether any of its keys exist at all.
func inspectOnce(ctx context.Context, ep *endpoint, m *lock.Mutex, limit int) (inspectReport, error) {
	st, err := m.Inspect(ctx, limit)
	if err != nil {
		return inspectReport{}, err
	}
	rep := buildInspectReport(m, st)
	if !st.Locked() && st.QueueLength == 0 && st.Token == 0 {
		// The timeout and liveness zsets may outlive the queue.
		n, err := ep.exists(ctx, m.Keys()...)
		if err != nil {
			return rep, err
		}
		rep.Exists = n > 0
	}
	return rep, nil
}

// isTerminal reports whether v (stdin, stdout or stderr) is a terminal.
func isTerminal(v any) bool {
	f, ok := v.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// buildInspectReport turns a snapshot into the report, with warnings.
func buildInspectReport(m *lock.Mutex, st inspect.State) inspectReport {
	rep := inspectReport{
		Name: m.Name(), Key: m.Keys()[0], ServerTime: st.ServerTime.UTC(), Locked: st.Locked(),
		Holders: []holder{}, Token: st.Token, QueueLength: st.QueueLength, Queue: []waiter{},
		Warnings: []string{}, leaseLeft: st.TTL, LeaseLeft: millis(st.TTL), Exists: true,
	}
	warn := func(format string, a ...any) { rep.Warnings = append(rep.Warnings, fmt.Sprintf(format, a...)) }
	for _, h := range st.Holders {
		hr := holder{Owner: h.Owner, Count: h.Count, clientInfo: newClientInfo(h.Description, h.Kind)}
		if id, n, err := inspect.ParseOwner(h.Owner); err == nil {
			hr.ClientID, hr.OwnerID = id, n
		} else {
			warn("holder field %q is not \"<clientID>:<ownerID>\": not written by fairlock or Redisson", h.Owner)
		}
		rep.Holders = append(rep.Holders, hr)
	}
	if st.DescriptionErr != nil {
		warn("could not read who the owners' clients are: %v", st.DescriptionErr)
	}
	if len(st.Holders) > 1 {
		warn("%d owners in the lock hash: a fair lock has one holder (reentrant holds share one field)", len(st.Holders))
	}
	if st.Locked() && st.TTL < 0 {
		warn("the lock has no expiry: it never frees itself, only an unlock or force-unlock releases it")
	}
	for i, w := range st.Queue {
		wr := waiter{Position: i + 1, Owner: w.Owner, clientInfo: newClientInfo(w.Description, w.Kind)}
		if id, n, err := inspect.ParseOwner(w.Owner); err == nil {
			wr.ClientID, wr.OwnerID = id, n
		}
		if w.Deadline.IsZero() {
			wr.Dead = true
			warn("waiter #%d %s has no deadline in the timeout zset: looks dead; it is dropped when it reaches the head", i+1, w.Owner)
		} else {
			d := w.Deadline.UTC()
			wr.Deadline = &d
			wr.deadlineIn = w.Deadline.Sub(st.ServerTime)
			wr.DeadlineIn = millis(wr.deadlineIn)
			if wr.deadlineIn <= 0 {
				wr.Dead = true
				warn("waiter #%d %s: deadline passed %s ago: looks dead (crashed or hung); it is dropped when it reaches the head", i+1, w.Owner, fmtDur(-wr.deadlineIn))
			}
		}
		rep.Queue = append(rep.Queue, wr)
	}
	if !st.Locked() && st.QueueLength > 0 && len(rep.Queue) > 0 && !rep.Queue[0].Dead {
		warn("the lock is free but %d owner(s) wait: normal for a moment during a hand-over; if it lasts, the head is not taking it", st.QueueLength)
	}
	return rep
}

// printInspect prints one snapshot for people.
func printInspect(w io.Writer, rep inspectReport) {
	fmt.Fprintf(w, "lock %q (key %s) at %s server time\n", rep.Name, rep.Key, rep.ServerTime.Format("2006-01-02 15:04:05.000 MST"))
	if !rep.Exists {
		fmt.Fprintf(w, "  no keys for %q on this server: nobody holds or waits for it, and no fairlock client\n"+
			"  ever took it (Redisson leaves no keys behind a free lock); check the name and --prefix\n", rep.Key)
		return
	}
	tw := newTable(w)
	switch {
	case len(rep.Holders) == 0:
		fmt.Fprintf(tw, "  holder\tnone (free)\n")
	default:
		for _, h := range rep.Holders {
			if h.ClientID == "" {
				fmt.Fprintf(tw, "  holder\t%s\thold count %d\n", h.Owner, h.Count)
			} else {
				fmt.Fprintf(tw, "  holder\tclient %s  owner %d\thold count %d\n", h.ClientID, h.OwnerID, h.Count)
			}
			if who := h.clientInfo.String(); who != "" {
				fmt.Fprintf(tw, "  held by\t%s\n", who)
			}
		}
	}
	switch {
	case !rep.Locked:
		fmt.Fprintf(tw, "  lease left\t-\n")
	case rep.leaseLeft < 0:
		fmt.Fprintf(tw, "  lease left\tno expiry\n")
	default:
		fmt.Fprintf(tw, "  lease left\t%s\n", fmtDur(rep.leaseLeft))
	}
	if rep.Token == 0 {
		fmt.Fprintf(tw, "  fencing token\tnone issued (Redisson clients issue none)\n")
	} else {
		fmt.Fprintf(tw, "  fencing token\t%d\n", rep.Token)
	}
	queue := fmt.Sprintf("%d waiting", rep.QueueLength)
	if rep.QueueLength > len(rep.Queue) {
		queue += fmt.Sprintf(" (showing the first %d; see --limit)", len(rep.Queue))
	}
	fmt.Fprintf(tw, "  queue\t%s\n", queue)
	_ = tw.Flush()
	if len(rep.Queue) > 0 {
		tw = newTable(w)
		fmt.Fprintln(tw, "    #\tCLIENT\tOWNER\tDEADLINE\tIN\t\tWHO")
		for _, q := range rep.Queue {
			client, owner := q.ClientID, fmt.Sprint(q.OwnerID)
			if client == "" {
				client, owner = q.Owner, "?"
			}
			deadline, in, note := "none", "-", ""
			if q.Deadline != nil {
				deadline, in = q.Deadline.Format("15:04:05.000"), fmtDur(q.deadlineIn)
			}
			if q.Dead {
				note = "dead?"
			}
			fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\t%s\t%s\t%s\n", q.Position, client, owner, deadline, in, note, q.clientInfo.String())
		}
		_ = tw.Flush()
	}
	for _, s := range rep.Warnings {
		fmt.Fprintf(w, "  warning: %s\n", s)
	}
}
