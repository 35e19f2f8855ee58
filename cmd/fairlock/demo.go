package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/observe"
	"github.com/spf13/cobra"
)

const demoDoc = `
Starts --workers workers, one after another, that contend for one lock, and prints as it
runs who holds the lock, the queue, each hand-over and its latency. The first worker holds
the lock until every other worker has queued, so the arrival order is known; the summary
compares it with the order of acquisition (a FIFO violation is a position where they differ;
there must be none), and lists wait times and hand-over latencies.

Then a "crasher" takes the lock with a --lease and no watchdog and never unlocks, and a
waiter acquires once the lease has run out on the server, with no unlock.

Without --addr or REDIS_URL the demo starts an embedded Redis-compatible server (miniredis).
Exit code 1 when a FIFO violation is found or the lease did not hand the lock over.`

// demoCommand is "fairlock demo". do runs the parsed configuration; nil
// runs the demo.
func demoCommand(e env, do func(context.Context, demoConfig) error) *cobra.Command {
	if do == nil {
		do = func(ctx context.Context, cfg demoConfig) error {
			_, err := cfg.run(ctx, e)
			return err
		}
	}
	var cfg demoConfig
	cmd := &cobra.Command{
		Use:   "demo [flags]",
		Short: "watch workers take one lock in FIFO order, then a crashed holder's lease run out",
		Long:  demoDoc,
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := cfg.check(); err != nil {
				return err
			}
			return do(c.Context(), cfg)
		},
	}
	cfg.conn.register(cmd, false, backendRueidis)
	fs := cmd.Flags()
	fs.StringVar(&cfg.name, "name", "fairlock-demo", "lock `name`")
	fs.IntVar(&cfg.workers, "workers", 5, "workers contending for the lock (2-100)")
	newDuration(fs, &cfg.hold, "hold", 200*time.Millisecond, "how long each worker holds the lock")
	newDuration(fs, &cfg.lease, "lease", time.Second, "the crashing holder's lease")
	fs.BoolVar(&cfg.json, "json", false, "print one JSON report at the end instead of the live table")
	return cmd
}

// demoConfig is the demo's flags, plus a hook for tests.
type demoConfig struct {
	conn    connFlags
	name    string
	workers int
	hold    time.Duration
	lease   time.Duration
	json    bool

	// allQueued, when set, runs once every worker has queued and before
	// the first holder releases the lock. Tests use it to reorder the
	// queue on the server and check that the demo reports the violation.
	allQueued func(ctx context.Context) error
}

// parseDemo parses the demo's command line without running it.
func parseDemo(e env, args []string) (cfg demoConfig, err error) {
	err = parseOnly(e, demoCommand(e, func(_ context.Context, c demoConfig) error { cfg = c; return nil }), args)
	return cfg, err
}

// check checks the values of the flags.
func (cfg demoConfig) check() error {
	switch {
	case cfg.workers < 2 || cfg.workers > 100:
		return usageError("--workers must be from 2 to 100, got %d", cfg.workers)
	case cfg.hold < 0:
		return usageError("--hold must not be negative, got %v", cfg.hold)
	case cfg.lease < 100*time.Millisecond || cfg.lease > time.Hour:
		// The waiter must queue while the crasher's lease runs.
		return usageError("--lease must be from 100ms to 1h, got %v", cfg.lease)
	}
	return nil
}

// demoStepTimeout bounds each wait of the demo for something that takes a
// round trip or two (a worker queueing, a hold ending), so that a broken
// lock fails the demo instead of hanging it.
const demoStepTimeout = 10 * time.Second

// demoLease is the watchdog lease of the demo's workers: short, so that a
// demo killed while holding frees the lock soon.
const demoLease = 5 * time.Second

// demoReport is what the demo found; --json prints it.
type demoReport struct {
	Server         string             `json:"server"`
	Embedded       bool               `json:"embedded"`
	Backend        string             `json:"backend"`
	ClientTracking bool               `json:"client_tracking"`
	Lock           string             `json:"lock"`
	Events         []demoEvent        `json:"events"`
	Workers        []demoWorkerReport `json:"workers"`
	Arrival        []string           `json:"arrival_order"`
	Acquisition    []string           `json:"acquisition_order"`
	FIFOViolations int                `json:"fifo_violations"`
	Violations     []fifoViolation    `json:"violations"`
	Wait           durStats           `json:"wait"`
	Handover       durStats           `json:"handover"`
	Handovers      []handover         `json:"handovers"`
	LeaseExpiry    leaseReport        `json:"lease_expiry"`
	OK             bool               `json:"ok"`
}

// demoEvent is one line of the live table.
type demoEvent struct {
	At     float64  `json:"at_ms"` // since the demo started
	Event  string   `json:"event"` // acquire, queued, unlock, crash, lost
	Worker string   `json:"worker"`
	Token  int64    `json:"token,omitempty"`
	Holder string   `json:"holder,omitempty"`
	Queue  []string `json:"queue,omitempty"`
	Detail string   `json:"detail"`

	at       time.Duration
	hasState bool // Holder and Queue were read
}

// demoWorkerReport is one FIFO worker's part; times are ms since the start.
type demoWorkerReport struct {
	Name     string  `json:"name"`
	Owner    string  `json:"owner"`
	Arrived  float64 `json:"arrived_ms"`
	Position int     `json:"position"` // queue position on arrival; 0: took a free lock
	Acquired float64 `json:"acquired_ms"`
	Token    int64   `json:"token"`
	Waited   float64 `json:"waited_ms"`
	Held     float64 `json:"held_ms"`
}

// handover is one release followed by the next holder's acquire.
type handover struct {
	From    string  `json:"from"`
	To      string  `json:"to"`
	Latency float64 `json:"latency_ms"` // from the Unlock call to the next Lock's return
	latency time.Duration
}

// leaseReport is the lease-expiry part of the demo.
type leaseReport struct {
	Lease        float64 `json:"lease_ms"`
	CrasherToken int64   `json:"crasher_token"`
	WaiterToken  int64   `json:"waiter_token"`
	// Takeover is the time from the crasher's Lock call to the waiter's
	// acquire; at least the lease when the lock works.
	Takeover        float64 `json:"takeover_ms"`
	WaiterWaited    float64 `json:"waiter_waited_ms"`
	CrasherUnlocked bool    `json:"crasher_unlocked"` // always false: the crasher never calls Unlock
	CrasherHoldErr  string  `json:"crasher_hold_err"` // how the crasher's Hold ended
	OK              bool    `json:"ok"`
	Problem         string  `json:"problem,omitempty"`
}

// demo is one run of the demo.
type demo struct {
	cfg   demoConfig
	out   io.Writer // live table; io.Discard with --json
	ep    *endpoint
	start time.Time
	spy   *lock.Mutex // reads the lock's state; holds nothing
	qcol  int         // width of the QUEUE column

	mu      sync.Mutex
	events  []demoEvent
	names   map[string]string   // owner field -> worker name
	unlocks map[int64]unlockRec // token -> the Unlock that ended that hold
	crashed int64               // the crasher's token
	clients []*lock.Client
}

type unlockRec struct {
	worker string
	at     time.Time
}

// demoWorker is one contender: its own lock.Client (as a separate process
// would have) and Mutex.
type demoWorker struct {
	name    string
	mutex   *lock.Mutex
	obs     *workerObserver
	holding chan struct{} // closed when the worker holds the lock
	done    chan struct{} // closed when the worker's goroutine has ended

	// Written by the worker's goroutine before it closes done (arrived
	// and position by the launcher).
	arrived, called, acquired, unlocked time.Time
	position                            int
	token                               int64
	err                                 error
}

// run runs the demo and prints it; the error says what failed, including a
// FIFO violation or a failed lease takeover (the report is complete then).
func (cfg demoConfig) run(ctx context.Context, e env) (rep demoReport, err error) {
	srv, err := cfg.conn.server(e, true)
	if err != nil {
		return rep, err
	}
	defer srv.Close()
	ep, err := srv.open(cfg.conn.backend())
	if err != nil {
		return rep, err
	}
	defer ep.Close()

	d := &demo{cfg: cfg, out: e.stdout, ep: ep, qcol: queueColumn(cfg.workers),
		names: make(map[string]string), unlocks: make(map[int64]unlockRec)}
	if cfg.json {
		d.out = io.Discard
	}
	defer d.closeClients()
	spyClient, err := d.newClient(nil)
	if err != nil {
		return rep, err
	}
	if d.spy, err = spyClient.NewMutex(cfg.name); err != nil {
		return rep, usageError("bad --name: %v", err)
	}
	st, err := d.spy.Inspect(ctx, 1)
	if err != nil {
		return rep, err
	}
	if st.Locked() || st.QueueLength > 0 {
		return rep, fmt.Errorf("lock %q is in use on %s (%d holder(s), %d queued): pick another --name", cfg.name, srv, len(st.Holders), st.QueueLength)
	}

	rep = demoReport{Server: srv.String(), Embedded: srv.embedded != nil, Backend: ep.name,
		ClientTracking: ep.tracking, Lock: d.spy.Keys()[0]}
	fmt.Fprintf(d.out, "fairlock demo: %d workers on lock %q, %s, backend %s\n", cfg.workers, d.spy.Keys()[0], srv, ep.name)
	d.start = time.Now()

	workers, err := d.fifoPhase(ctx)
	if err != nil {
		return rep, err
	}
	lease, err := d.leasePhase(ctx)
	if err != nil {
		return rep, err
	}
	d.summarise(&rep, workers, lease)
	if cfg.json {
		if err := writeJSON(e.stdout, rep); err != nil {
			return rep, err
		}
	} else {
		d.printSummary(rep, workers)
	}
	switch {
	case rep.FIFOViolations > 0:
		return rep, fmt.Errorf("FIFO order violated: %d violation(s)", rep.FIFOViolations)
	case !rep.LeaseExpiry.OK:
		return rep, fmt.Errorf("lease expiry: %s", rep.LeaseExpiry.Problem)
	}
	return rep, nil
}

func (d *demo) newClient(obs observe.Observer) (*lock.Client, error) {
	opts := append([]lock.Option{lock.WithLease(demoLease)}, d.cfg.conn.lockOptions()...)
	if obs != nil {
		opts = append(opts, lock.WithObserver(obs))
	}
	c, err := lock.NewClient(d.ep.backend, opts...)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.clients = append(d.clients, c)
	d.mu.Unlock()
	return c, nil
}

func (d *demo) closeClients() {
	d.mu.Lock()
	clients := d.clients
	d.clients = nil
	d.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
}

// newWorker makes a worker with its own client and names its owner in the
// live table.
func (d *demo) newWorker(name string) (*demoWorker, error) {
	obs := newWorkerObserver()
	c, err := d.newClient(obs)
	if err != nil {
		return nil, err
	}
	m, err := c.NewMutex(d.cfg.name)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.names[m.Owner()] = name
	d.mu.Unlock()
	return &demoWorker{name: name, mutex: m, obs: obs,
		holding: make(chan struct{}), done: make(chan struct{})}, nil
}

// fifoPhase starts the workers one after another - each once the previous
// one has queued - and lets them take the lock in turn. The first worker
// holds the lock until all have queued.
func (d *demo) fifoPhase(ctx context.Context) ([]*demoWorker, error) {
	var workers []*demoWorker
	for i := range d.cfg.workers {
		w, err := d.newWorker(fmt.Sprintf("w%d", i+1))
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	fmt.Fprintf(d.out, "\nFIFO: the first worker holds the lock until the others have queued, one after another\n")
	d.header()

	wctx, cancel := context.WithCancel(ctx)
	started := 0
	defer func() {
		cancel()
		for _, w := range workers[:started] {
			<-w.done // bounded: Lock and Unlock return soon after cancel
		}
	}()
	gate := make(chan struct{})
	for i, w := range workers {
		w.arrived = time.Now()
		var g <-chan struct{}
		if i == 0 {
			g = gate
		}
		go d.runWorker(wctx, w, g, d.cfg.hold)
		started++
		if i == 0 {
			if err := awaitSignal(ctx, w.holding, w, "take the free lock"); err != nil {
				return nil, err
			}
			continue
		}
		pos, err := awaitQueued(ctx, w, "queue")
		if err != nil {
			return nil, err
		}
		w.position = pos
		note := fmt.Sprintf("position %d", pos)
		if pos != i {
			note += fmt.Sprintf(" (not %d: someone else is queued)", i)
		}
		d.stateEvent(ctx, "queued", w.name, 0, note)
	}
	if d.cfg.allQueued != nil {
		if err := d.cfg.allQueued(ctx); err != nil {
			return nil, fmt.Errorf("allQueued hook: %w", err)
		}
	}
	close(gate)
	limit := time.NewTimer(time.Duration(len(workers))*d.cfg.hold + demoStepTimeout)
	defer limit.Stop()
	for _, w := range workers {
		select {
		case <-w.done:
		case <-limit.C:
			return nil, fmt.Errorf("worker %s did not finish in time", w.name)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if w.err != nil {
			return nil, fmt.Errorf("worker %s: %w", w.name, w.err)
		}
	}
	return workers, nil
}

// awaitSignal waits, at most demoStepTimeout, for ch to close, failing early
// when w's goroutine ends first.
func awaitSignal(ctx context.Context, ch <-chan struct{}, w *demoWorker, what string) error {
	t := time.NewTimer(demoStepTimeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-w.done:
		return fmt.Errorf("worker %s could not %s: %w", w.name, what, w.err)
	case <-t.C:
		return fmt.Errorf("worker %s did not %s within %v", w.name, what, demoStepTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// awaitQueued waits, at most demoStepTimeout, until w has joined the queue
// and returns its position, as the acquire script reported it.
func awaitQueued(ctx context.Context, w *demoWorker, what string) (int, error) {
	t := time.NewTimer(demoStepTimeout)
	defer t.Stop()
	select {
	case pos := <-w.obs.queued:
		return pos, nil
	case <-w.holding:
		select {
		case pos := <-w.obs.queued: // queued, then acquired at once
			return pos, nil
		default:
			return 0, fmt.Errorf("worker %s acquired without queueing: the lock was not held", w.name)
		}
	case <-w.done:
		if w.err == nil {
			return 0, fmt.Errorf("worker %s acquired without queueing: the lock was not held", w.name)
		}
		return 0, fmt.Errorf("worker %s could not %s: %w", w.name, what, w.err)
	case <-t.C:
		return 0, fmt.Errorf("worker %s did not %s within %v", w.name, what, demoStepTimeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// runWorker takes the lock, holds it - after gate closes, when not nil -
// for hold, and unlocks. It closes w.done when it ends.
func (d *demo) runWorker(ctx context.Context, w *demoWorker, gate <-chan struct{}, hold time.Duration) {
	defer close(w.done)
	w.called = time.Now()
	h, err := w.mutex.Lock(ctx)
	if err != nil {
		w.err = err
		return
	}
	w.acquired, w.token = time.Now(), h.Token()
	d.stateEvent(ctx, "acquire", w.name, w.token, d.acquireNote(w))
	close(w.holding)
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	sleep(ctx, hold) // the worker's "work" while it holds the lock
	w.unlocked = time.Now()
	d.mu.Lock()
	d.unlocks[w.token] = unlockRec{worker: w.name, at: w.unlocked}
	d.mu.Unlock()
	d.event(demoEvent{Event: "unlock", Worker: w.name, Detail: "held " + fmtDur(w.unlocked.Sub(w.acquired))}, w.unlocked)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoStepTimeout)
	defer cancel()
	if err := w.mutex.Unlock(uctx); err != nil {
		w.err = err
	}
}

// acquireNote says how w came to hold the lock.
func (d *demo) acquireNote(w *demoWorker) string {
	waited := "waited " + fmtDur(w.acquired.Sub(w.called))
	d.mu.Lock()
	prev, ok := d.unlocks[w.token-1]
	crashed := d.crashed != 0 && d.crashed == w.token-1
	d.mu.Unlock()
	switch {
	case ok:
		return fmt.Sprintf("hand-over %s after %s's unlock; %s", fmtDur(w.acquired.Sub(prev.at)), prev.worker, waited)
	case crashed:
		return "lease ran out, no unlock; " + waited
	default:
		return "lock was free; " + waited
	}
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// leasePhase: a crasher takes the lock with a lease and never unlocks; a
// waiter must get the lock when the lease runs out on the server.
func (d *demo) leasePhase(ctx context.Context) (rep leaseReport, err error) {
	rep.Lease = millis(d.cfg.lease)
	crasher, err := d.newWorker("crasher")
	if err != nil {
		return rep, err
	}
	waiter, err := d.newWorker("waiter")
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(d.out, "\nLease expiry: a holder with a %s lease crashes without unlocking\n", fmtDur(d.cfg.lease))
	d.header()

	crasher.called = time.Now()
	h, err := crasher.mutex.LockWithLease(ctx, d.cfg.lease)
	if err != nil {
		return rep, fmt.Errorf("crasher: %w", err)
	}
	crasher.acquired, crasher.token = time.Now(), h.Token()
	rep.CrasherToken = crasher.token
	d.mu.Lock()
	d.crashed = crasher.token
	d.mu.Unlock()
	d.stateEvent(ctx, "acquire", crasher.name, crasher.token,
		fmt.Sprintf("lease %s, no watchdog; %s", fmtDur(d.cfg.lease), "waited "+fmtDur(crasher.acquired.Sub(crasher.called))))
	d.event(demoEvent{Event: "crash", Worker: crasher.name, Detail: "stops without unlocking"}, time.Now())

	wctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		<-waiter.done
	}()
	go d.runWorker(wctx, waiter, nil, 0)
	pos, err := awaitQueued(ctx, waiter, "queue behind the crasher")
	if err != nil {
		return rep, err
	}
	waiter.position = pos
	d.stateEvent(ctx, "queued", waiter.name, 0, fmt.Sprintf("position %d; waits for the lease to run out", pos))

	// Both must happen within the lease plus a step: the crasher's Hold
	// ends (its client sees the lease run out) and the waiter acquires.
	limit := time.NewTimer(d.cfg.lease + demoStepTimeout)
	defer limit.Stop()
	lost, acquired := h.Done(), (<-chan struct{})(waiter.done)
	for lost != nil || acquired != nil {
		select {
		case <-lost:
			lost = nil
			d.event(demoEvent{Event: "lost", Worker: crasher.name, Detail: "hold ended: " + errText(h.Err())}, time.Now())
		case <-acquired:
			acquired = nil
			if waiter.err != nil {
				return rep, fmt.Errorf("waiter: %w", waiter.err)
			}
		case <-limit.C:
			rep.Problem = fmt.Sprintf("nothing happened within the lease (%v) plus %v", d.cfg.lease, demoStepTimeout)
			return rep, nil
		case <-ctx.Done():
			return rep, ctx.Err()
		}
	}
	rep.WaiterToken = waiter.token
	takeover := waiter.acquired.Sub(crasher.called)
	rep.Takeover, rep.WaiterWaited = millis(takeover), millis(waiter.acquired.Sub(waiter.called))
	rep.CrasherHoldErr = errText(h.Err())
	switch {
	case takeover < d.cfg.lease:
		rep.Problem = fmt.Sprintf("the waiter acquired %v after the crasher's Lock, before its %v lease ran out", takeover, d.cfg.lease)
	case !errors.Is(h.Err(), lock.ErrLockLost):
		rep.Problem = "the crasher's hold did not end as lost: " + rep.CrasherHoldErr
	default:
		rep.OK = true
	}
	return rep, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// queueColumn is the width of the QUEUE column for n workers: room for all
// workers but one, within reason.
func queueColumn(n int) int {
	var names []string
	for i := 2; i <= n; i++ {
		names = append(names, fmt.Sprintf("w%d", i))
	}
	return min(max(len("QUEUE"), len("waiter"), len(strings.Join(names, " "))), 40)
}

// demoRowFormat lays out a row; TOKEN fits a fencing token drawn from the
// server's clock in microseconds (16 digits).
const demoRowFormat = "  %8s  %-8s %-8s %16s  %-8s %-*s  %s"

func (d *demo) header() {
	line := fmt.Sprintf(demoRowFormat, "TIME", "EVENT", "WORKER", "TOKEN", "HOLDER", d.qcol, "QUEUE", "DETAIL")
	fmt.Fprintln(d.out, line)
}

// stateEvent records an event together with the lock's holder and queue,
// read right after it.
func (d *demo) stateEvent(ctx context.Context, kind, worker string, token int64, detail string) {
	at := time.Now()
	ev := demoEvent{Event: kind, Worker: worker, Token: token, Detail: detail}
	if st, err := d.spy.Inspect(ctx, d.cfg.workers+2); err == nil {
		ev.hasState = true
		ev.Holder = "-"
		if len(st.Holders) > 0 {
			ev.Holder = d.nameOf(st.Holders[0].Owner)
		}
		for _, wt := range st.Queue {
			ev.Queue = append(ev.Queue, d.nameOf(wt.Owner))
		}
	}
	d.event(ev, at)
}

// nameOf returns the worker name of an owner field, or the field itself for
// an owner outside the demo.
func (d *demo) nameOf(owner string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n, ok := d.names[owner]; ok {
		return n
	}
	return owner
}

// event records ev, which happened at at, and prints it.
func (d *demo) event(ev demoEvent, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ev.at = at.Sub(d.start)
	ev.At = millis(ev.at)
	d.events = append(d.events, ev)
	token, holder, queue := "", "", ""
	if ev.Token != 0 {
		token = fmt.Sprint(ev.Token)
	}
	if ev.hasState {
		holder, queue = ev.Holder, "-"
		if len(ev.Queue) > 0 {
			queue = truncate(strings.Join(ev.Queue, " "), d.qcol)
		}
	}
	line := fmt.Sprintf(demoRowFormat, fmtSince(ev.at), ev.Event, ev.Worker, token, holder, d.qcol, queue, ev.Detail)
	fmt.Fprintln(d.out, strings.TrimRight(line, " "))
}

// truncate shortens s to n characters, marking the cut with "…".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// summarise fills in the report from the workers and the lease phase.
func (d *demo) summarise(rep *demoReport, workers []*demoWorker, lease leaseReport) {
	d.mu.Lock()
	rep.Events = slices.Clone(d.events)
	d.mu.Unlock()
	var waits []time.Duration
	for _, w := range workers {
		rep.Arrival = append(rep.Arrival, w.name)
		waits = append(waits, w.acquired.Sub(w.called))
		rep.Workers = append(rep.Workers, demoWorkerReport{
			Name: w.name, Owner: w.mutex.Owner(),
			Arrived: millis(w.arrived.Sub(d.start)), Position: w.position,
			Acquired: millis(w.acquired.Sub(d.start)), Token: w.token,
			Waited: millis(w.acquired.Sub(w.called)), Held: millis(w.unlocked.Sub(w.acquired)),
		})
	}
	byToken := slices.Clone(workers)
	slices.SortFunc(byToken, func(a, b *demoWorker) int { return int(a.token - b.token) })
	var latencies []time.Duration
	for i, w := range byToken {
		rep.Acquisition = append(rep.Acquisition, w.name)
		if i > 0 && byToken[i-1].token == w.token-1 {
			prev := byToken[i-1]
			l := w.acquired.Sub(prev.unlocked)
			rep.Handovers = append(rep.Handovers, handover{From: prev.name, To: w.name, Latency: millis(l), latency: l})
			latencies = append(latencies, l)
		}
	}
	rep.Violations = append([]fifoViolation{}, checkFIFO(rep.Arrival, rep.Acquisition)...)
	rep.FIFOViolations = len(rep.Violations)
	rep.Wait, rep.Handover = summarise(waits), summarise(latencies)
	rep.LeaseExpiry = lease
	rep.OK = rep.FIFOViolations == 0 && lease.OK
}

func (d *demo) printSummary(rep demoReport, workers []*demoWorker) {
	w := d.out
	fmt.Fprintf(w, "\nSummary\n")
	tw := newTable(w)
	fmt.Fprintf(tw, "  arrival order\t%s\n", strings.Join(rep.Arrival, " "))
	fmt.Fprintf(tw, "  acquisition order\t%s\n", strings.Join(rep.Acquisition, " "))
	fmt.Fprintf(tw, "  FIFO violations\t%d\n", rep.FIFOViolations)
	for _, v := range rep.Violations {
		fmt.Fprintf(tw, "  \t  position %d: expected %s, got %s\n", v.Position, orNone(v.Expected), orNone(v.Got))
	}
	fmt.Fprintf(tw, "  wait for the lock\t%s\n", rep.Wait)
	fmt.Fprintf(tw, "  hand-over latency\t%s\n", rep.Handover)
	_ = tw.Flush()

	fmt.Fprintln(w)
	tw = newTable(w)
	fmt.Fprintln(tw, "  WORKER\tARRIVED\tPOSITION\tACQUIRED\tTOKEN\tWAITED\tHELD\tHAND-OVER")
	handovers := make(map[string]time.Duration)
	for _, h := range rep.Handovers {
		handovers[h.To] = h.latency
	}
	for _, wk := range workers {
		pos, ho := "-", "-"
		if wk.position > 0 {
			pos = fmt.Sprint(wk.position)
		}
		if l, ok := handovers[wk.name]; ok {
			ho = fmtDur(l)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", wk.name,
			fmtSince(wk.arrived.Sub(d.start)), pos, fmtSince(wk.acquired.Sub(d.start)), wk.token,
			fmtDur(wk.acquired.Sub(wk.called)), fmtDur(wk.unlocked.Sub(wk.acquired)), ho)
	}
	_ = tw.Flush()

	le := rep.LeaseExpiry
	fmt.Fprintf(w, "\nLease expiry\n")
	tw = newTable(w)
	fmt.Fprintf(tw, "  crasher\ttoken %d, lease %s, never unlocked; its hold ended: %s\n", le.CrasherToken, fmtDur(d.cfg.lease), orNone(le.CrasherHoldErr))
	fmt.Fprintf(tw, "  waiter\ttoken %d, acquired %s after the crasher's Lock (waited %s)\n", le.WaiterToken,
		fmtDur(time.Duration(le.Takeover*float64(time.Millisecond))), fmtDur(time.Duration(le.WaiterWaited*float64(time.Millisecond))))
	if le.OK {
		fmt.Fprintf(tw, "  result\tOK: the lease ran out on the server and the waiter took over without an unlock\n")
	} else {
		fmt.Fprintf(tw, "  result\tFAILED: %s\n", le.Problem)
	}
	_ = tw.Flush()

	if rep.OK {
		fmt.Fprintf(w, "\nResult: OK - %d workers acquired in arrival order, 0 FIFO violations; lease expiry handed the lock over\n", len(workers))
	} else {
		fmt.Fprintf(w, "\nResult: FAILED\n")
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// workerObserver tells the demo when its worker queued and when its hold
// was lost. It implements observe.Observer and observe.AcquireTracker.
type workerObserver struct {
	queued chan int // the queue position, once per acquire call that queued
}

func newWorkerObserver() *workerObserver {
	return &workerObserver{queued: make(chan int, 1)}
}

// StartAcquire implements observe.Observer.
func (o *workerObserver) StartAcquire(ctx context.Context, _ observe.Call) (context.Context, observe.AcquireTracker) {
	return ctx, o
}

// StartRelease implements observe.Observer.
func (o *workerObserver) StartRelease(ctx context.Context, _ observe.Call) (context.Context, observe.ReleaseTracker) {
	return ctx, releaseIgnored{}
}

// HoldLost implements observe.Observer; the demo watches Hold.Done instead.
func (o *workerObserver) HoldLost(observe.Call, int64, time.Duration, error) {}

// Renewed implements observe.Observer.
func (o *workerObserver) Renewed(observe.Call, error) {}

// Queued implements observe.AcquireTracker. It never blocks (observers must
// be quick): a second position in one acquire is dropped.
func (o *workerObserver) Queued(position int) {
	select {
	case o.queued <- position:
	default:
	}
}

// Woken implements observe.AcquireTracker.
func (o *workerObserver) Woken(bool) {}

// End implements observe.AcquireTracker.
func (o *workerObserver) End(observe.AcquireResult) {}

type releaseIgnored struct{}

func (releaseIgnored) End(observe.ReleaseResult) {}
