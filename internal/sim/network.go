package sim

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Faults are the chances (per message, 0..1) and sizes of what the
// switch does to messages. Zero values deliver every message at once.
type Faults struct {
	// Base is every message's latency (virtual): causes come strictly
	// before their effects on the history's clock, as on a real network
	// (with none, a grant and the unlock that caused it can share one
	// virtual instant, which the soak's checker reads as overlap).
	Base      time.Duration
	Delay     float64       // a message waits up to MaxDelay (virtual)
	MaxDelay  time.Duration //
	LongDelay float64       // a message waits up to MaxLong: a stall
	MaxLong   time.Duration //
	Fail      float64       // the connection fails before the request is delivered
	LoseReply float64       // the reply is lost after the command ran: the connection fails
}

// Decision is one step the switch took, for the replay trace.
type Decision struct {
	Conn  string // the connection's label
	Up    bool   // a request (client to server); false: a reply or push
	N     int    // the message's number on its connection and direction
	What  string // "deliver", "delay", "fail", "lose"
	Delay time.Duration
	Cmd   string // a request's command name
}

func (d Decision) String() string {
	dir := "down"
	if d.Up {
		dir = "up"
	}
	return fmt.Sprintf("%s %s #%d %s %s %s", d.Conn, dir, d.N, d.What, d.Delay, d.Cmd)
}

// Network connects clients to the in-process server through a switch
// that decides, per message and by the seed, to deliver, delay or fail.
// One connection keeps its order (each direction is one goroutine); two
// connections do not (each waits its own delays).
type Network struct {
	seed   uint64
	srv    *miniredis.Miniredis
	faults Faults
	hooks  Hooks

	mu      sync.Mutex
	dials   map[string]int
	trace   []Decision
	counts  map[string]int
	pausing time.Time // the server answers nothing before this
	conns   map[*link]struct{}
	movers  sync.WaitGroup // the forward goroutines (Close waits for them)

	tracing   bool // keep every decision (Trace)
	recording bool
	exchanges []Exchange
}

// Hooks are called by the switch's goroutines (they must not block).
type Hooks struct {
	// Replied is called when the server has answered (the reply may
	// still be lost): the invariant check runs after it.
	Replied func()
	// Fault is called for each decision other than a plain delivery or
	// a short delay, with the label passed to Dial.
	Fault func(who string, d Decision)
}

// NewNetwork returns a switch in front of srv.
func NewNetwork(seed uint64, srv *miniredis.Miniredis, f Faults, hooks Hooks) *Network {
	return &Network{seed: seed, srv: srv, faults: f, hooks: hooks,
		dials: map[string]int{}, counts: map[string]int{}, conns: map[*link]struct{}{}}
}

// link is one client connection: the client's end, the switch's two
// pipes and the server's end.
type link struct {
	who, label    string
	client, toSrv net.Conn // the switch's ends
	once          sync.Once
	pending       pendingCmds // requests delivered whose replies have not come
	up, down      *rand.Rand
}

func (l *link) close() {
	l.once.Do(func() {
		l.client.Close()
		l.toSrv.Close()
	})
}

// Dial opens a connection labelled by who (e.g. "rueidis#0"); the n-th
// dial of a label gets the same random streams in every run of a seed.
func (n *Network) Dial(who string) (net.Conn, error) {
	n.mu.Lock()
	i := n.dials[who]
	n.dials[who]++
	n.mu.Unlock()
	label := fmt.Sprintf("%s/%d", who, i)
	ss, err := n.srv.Dial() // a pipe to a server with no listener (synctest)
	if err != nil {
		return nil, err
	}
	cc, cs := net.Pipe()
	h := hashLabel(label)
	l := &link{who: who, label: label, client: cs, toSrv: ss,
		up: rand.New(rand.NewPCG(n.seed, h)), down: rand.New(rand.NewPCG(n.seed, h^0x9e3779b97f4a7c15))}
	n.mu.Lock()
	n.conns[l] = struct{}{}
	n.mu.Unlock()
	n.movers.Go(func() { n.forward(l, true) })
	n.movers.Go(func() { n.forward(l, false) })
	return cc, nil
}

// Close fails every connection still open and waits until their
// messages in flight are gone: a delivery still sleeping out its delay
// when the bubble's main goroutine returns would fail the bubble.
func (n *Network) Close() {
	n.mu.Lock()
	for l := range n.conns {
		l.close()
	}
	n.mu.Unlock()
	n.movers.Wait()
}

// forward moves the messages of one direction of l until it fails. A
// reader takes every frame off the sender at once into a queue, and the
// messages wait their delays there: a sender never blocks on the switch.
// That matters in the bubble: miniredis writes a published message while
// holding its peer's mutex, and a goroutine blocked on a mutex is not
// durably blocked, so a writer stuck behind a delay would stop the
// virtual clock that ends the delay.
func (n *Network) forward(l *link, up bool) {
	from, to, rnd := l.client, l.toSrv, l.up
	if !up {
		from, to, rnd = l.toSrv, l.client, l.down
	}
	q := newMailbox()
	go func() {
		defer q.close()
		r := bufio.NewReader(from)
		for {
			frame, err := readFrame(r)
			if err != nil {
				return
			}
			q.push(frame)
		}
	}()
	defer func() {
		l.close()
		n.mu.Lock()
		delete(n.conns, l)
		n.mu.Unlock()
	}()
	for i := 0; ; i++ {
		frame, ok := q.pop()
		if !ok || !n.deliver(l, up, rnd, i, frame, to) {
			return
		}
	}
}

// deliver decides the fate of message i and carries it out; false when
// the connection is to fail.
func (n *Network) deliver(l *link, up bool, rnd *rand.Rand, i int, frame []byte, to net.Conn) bool {
	d := Decision{Conn: l.label, Up: up, N: i, What: "deliver"}
	if up {
		d.Cmd = commandName(frame)
	}
	d = n.decide(rnd, d)
	n.record(d)
	if n.hooks.Fault != nil && (d.What == "fail" || d.What == "lose" || d.Delay > n.faults.Base+n.faults.MaxDelay) {
		n.hooks.Fault(l.who, d)
	}
	if d.Delay > 0 {
		time.Sleep(d.Delay)
	}
	if up {
		n.waitPause()
	}
	if d.What == "fail" {
		return false
	}
	if up {
		l.pending.push(d.Cmd, frame)
	} else if frame[0] != '>' {
		n.answered(l.pending.pop(), frame)
	}
	if d.What == "lose" {
		return false
	}
	_, err := to.Write(frame)
	return err == nil
}

// pendingCmds are the names of the requests a connection's server has
// been sent, oldest first: a reply (not a push) answers the oldest.
type pendingCmds struct {
	mu   sync.Mutex
	reqs []Exchange
}

func (p *pendingCmds) push(name string, frame []byte) {
	p.mu.Lock()
	p.reqs = append(p.reqs, Exchange{Cmd: name, Request: frame})
	p.mu.Unlock()
}

func (p *pendingCmds) pop() Exchange {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reqs) == 0 {
		return Exchange{}
	}
	e := p.reqs[0]
	p.reqs = p.reqs[1:]
	return e
}

// Exchange is one script request and the server's reply, as sent.
type Exchange struct {
	Cmd            string
	Request, Reply []byte
}

// answered handles the server's reply to req: a script ran, so the
// invariants are checked, and the exchange is recorded if asked.
func (n *Network) answered(req Exchange, reply []byte) {
	if !isScript(req.Cmd) {
		return
	}
	if n.hooks.Replied != nil {
		n.hooks.Replied()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.recording {
		req.Reply = reply
		n.exchanges = append(n.exchanges, req)
	}
}

// Record makes the switch keep every script request with its reply, in
// the order the replies came (Exchanges returns them).
func (n *Network) Record() {
	n.mu.Lock()
	n.recording = true
	n.mu.Unlock()
}

// Exchanges returns the recorded script exchanges.
func (n *Network) Exchanges() []Exchange {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Exchange(nil), n.exchanges...)
}

func isScript(cmd string) bool {
	switch cmd {
	case "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "EXEC":
		return true
	}
	return false
}

// mailbox is an unbounded queue of frames with one reader.
type mailbox struct {
	mu     sync.Mutex
	frames [][]byte
	closed bool
	ready  chan struct{} // holds a token while frames or closed wait
}

func newMailbox() *mailbox { return &mailbox{ready: make(chan struct{}, 1)} }

func (m *mailbox) push(f []byte) {
	m.mu.Lock()
	m.frames = append(m.frames, f)
	m.mu.Unlock()
	m.signal()
}

func (m *mailbox) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.signal()
}

func (m *mailbox) signal() {
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// pop waits for the next frame; false once the mailbox is closed and
// empty.
func (m *mailbox) pop() ([]byte, bool) {
	for {
		m.mu.Lock()
		if len(m.frames) > 0 {
			f := m.frames[0]
			m.frames[0] = nil
			m.frames = m.frames[1:]
			m.mu.Unlock()
			return f, true
		}
		closed := m.closed
		m.mu.Unlock()
		if closed {
			return nil, false
		}
		<-m.ready
	}
}

// decide draws what happens to one message. Every message draws the
// same number of values, so one decision does not shift the next.
func (n *Network) decide(rnd *rand.Rand, d Decision) Decision {
	f := n.faults
	p, q, size := rnd.Float64(), rnd.Float64(), rnd.Float64()
	switch {
	case d.Up && p < f.Fail:
		d.What = "fail"
	case !d.Up && p < f.LoseReply:
		d.What = "lose"
	}
	switch {
	case q < f.LongDelay:
		d.Delay = time.Duration(size * float64(f.MaxLong))
	case q < f.LongDelay+f.Delay:
		d.Delay = time.Duration(size * float64(f.MaxDelay))
	}
	if d.What == "deliver" && d.Delay > 0 {
		d.What = "delay"
	}
	d.Delay += f.Base
	return d
}

func (n *Network) record(d Decision) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.counts[d.What]++
	if n.tracing {
		n.trace = append(n.trace, d)
	}
}

// KeepTrace makes the switch keep every decision it takes (Trace
// returns them): a long history takes millions.
func (n *Network) KeepTrace() {
	n.mu.Lock()
	n.tracing = true
	n.mu.Unlock()
}

// Pause makes the server answer nothing for d (a SIGSTOP): requests wait
// at the switch.
func (n *Network) Pause(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pausing = time.Now().Add(d)
	n.counts["pause"]++
}

func (n *Network) waitPause() {
	n.mu.Lock()
	until := n.pausing
	n.mu.Unlock()
	if d := time.Until(until); d > 0 {
		time.Sleep(d)
	}
}

// FailAll fails every open connection (a server restart's view from the
// clients).
func (n *Network) FailAll() {
	n.mu.Lock()
	ls := make([]*link, 0, len(n.conns))
	for l := range n.conns {
		ls = append(ls, l)
	}
	n.counts["fail-all"]++
	n.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
}

// Trace returns the decisions so far, in the order they were taken (none
// without KeepTrace).
func (n *Network) Trace() []Decision {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Decision(nil), n.trace...)
}

// Counts returns how many decisions of each kind were taken.
func (n *Network) Counts() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]int, len(n.counts))
	for k, v := range n.counts {
		out[k] = v
	}
	return out
}

// hashLabel is FNV-1a: a connection's random streams follow from its
// label, not from the order connections were made in.
func hashLabel(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// commandName returns a request's first word, upper-cased ("" if the
// frame is not an array of bulk strings).
func commandName(frame []byte) string {
	// *N\r\n$L\r\nNAME\r\n
	i := 0
	for k := 0; k < 2; k++ {
		for i < len(frame) && frame[i] != '\n' {
			i++
		}
		i++
	}
	j := i
	for j < len(frame) && frame[j] != '\r' {
		j++
	}
	if i >= len(frame) || j > len(frame) {
		return ""
	}
	b := []byte(string(frame[i:j]))
	for k, c := range b {
		if c >= 'a' && c <= 'z' {
			b[k] = c - 32
		}
	}
	return string(b)
}
