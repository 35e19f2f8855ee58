package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

const (
	proxyDialTimeout = 5 * time.Second  // one dial to the proxy's target
	proxyStopTimeout = 15 * time.Second // until every proxy goroutine has returned
	proxyChunkSize   = 32 << 10         // largest chunk read at once
	// proxyQueueLen bounds the chunks in flight per direction (read, not yet
	// written); a full queue stops the reading, so memory stays bounded.
	proxyQueueLen = 64
)

// Proxy is a TCP proxy on 127.0.0.1 in front of one target address, for
// fault tests: clients connect to Addr instead of the server, and the test
// partitions them from it (Blackhole), resets their connections (ResetAll)
// or slows them down (SetLatency). Its methods are safe for concurrent use.
//
// Each accepted connection is forwarded to its own connection to the
// target. A half-close (EOF) is passed on once the bytes before it have been
// written; a read or write error on either side closes both connections
// with a reset. A connection to the target that cannot be made (target down,
// or no answer within 5 s) is reset.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled when the proxy is closed; ends dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and one serve per connection

	mu       sync.Mutex
	closed   bool
	holding  bool          // Blackhole is on
	released chan struct{} // closed when Blackhole goes off; valid while holding
	latency  time.Duration
	pairs    map[*pair]struct{}
}

// StartProxy starts a Proxy on a free 127.0.0.1 port that forwards every
// connection to target ("host:port"). A t.Cleanup hook closes the listener
// and every connection and waits (at most 15 s, else the test fails) until
// all of the proxy's goroutines have returned. If it cannot listen,
// StartProxy calls t.Fatalf.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy for %s: %v", target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{target: target, ln: ln, ctx: ctx, cancel: cancel, pairs: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(func() {
		if err := p.close(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return p
}

// Addr returns the address clients connect to, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Blackhole partitions everything behind the proxy while on: no byte is
// forwarded in either direction, yet none is dropped and no connection is
// closed, as when packets vanish in a network partition. The proxy stops
// reading from both sides (a chunk it had already read waits in the proxy,
// the rest in the kernel's buffers, so senders block once those fill).
// Connections accepted meanwhile are accepted but silent: they reach the
// target only when the blackhole is lifted. Blackhole(false) resumes
// forwarding: everything held back is delivered in order, so a client that
// kept its connection after a timeout then receives the late replies, and
// a server receives commands a client may since have given up on.
//
// Unlike a real partition, TCP keepalives between a client and the proxy
// are still answered (by the kernel); clients notice only through their
// own timeouts.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.holding {
		return
	}
	p.holding = on
	if on {
		p.released = make(chan struct{})
	} else {
		close(p.released)
	}
}

// ResetAll closes every current connection abruptly, on the client side and
// on the target side (SO_LINGER 0, so each peer sees a reset, ECONNRESET,
// rather than an orderly EOF). Bytes held back by Blackhole or SetLatency
// are dropped with them. Connections accepted afterwards work as usual.
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()
	for _, pr := range pairs {
		pr.close(true)
	}
}

// SetLatency delays every chunk of bytes by d in each direction: a chunk
// the proxy reads at time t is written no earlier than t+d, and in order.
// Chunks are delayed independently of one another, so throughput does not
// suffer; a round trip through the proxy takes at least 2*d. The new value
// applies to chunks read from then on; 0 (the default) turns the delay off.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency = max(d, 0)
}

// Conns returns the number of open connections through the proxy: accepted
// and not yet ended (by both sides hanging up, an error, ResetAll or a
// failed dial), including those a blackhole keeps from reaching the target.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for pr := range p.pairs {
		if !pr.isClosed() {
			n++
		}
	}
	return n
}

// pair is one client connection and its connection to the target.
type pair struct {
	client net.Conn
	done   chan struct{} // closed by close
	once   sync.Once

	mu     sync.Mutex
	server net.Conn // nil until dialled
}

// close closes both connections, with a reset if reset is set, and ends
// every wait of the pair's goroutines. Only the first call has an effect.
func (pr *pair) close(reset bool) {
	pr.once.Do(func() {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		close(pr.done)
		closeConn(pr.client, reset)
		if pr.server != nil {
			closeConn(pr.server, reset)
		}
	})
}

func (pr *pair) isClosed() bool {
	select {
	case <-pr.done:
		return true
	default:
		return false
	}
}

// setServer records the connection to the target. It reports false, and
// the caller must close conn, if the pair has been closed meanwhile.
func (pr *pair) setServer(conn net.Conn) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.isClosed() {
		return false
	}
	pr.server = conn
	return true
}

// closeConn closes conn; with reset, SO_LINGER 0 makes the kernel send a
// RST instead of a FIN.
func closeConn(conn net.Conn, reset bool) {
	if tc, ok := conn.(*net.TCPConn); ok && reset {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// chunk is a piece of the byte stream in flight through the proxy.
type chunk struct {
	data []byte
	due  time.Time // written no earlier than this
}

// close stops the proxy and waits for its goroutines.
func (p *Proxy) close() error {
	p.mu.Lock()
	p.closed = true
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()
	p.cancel()
	_ = p.ln.Close()
	for _, pr := range pairs {
		pr.close(true)
	}
	stopped := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(stopped)
	}()
	timer := time.NewTimer(proxyStopTimeout)
	defer timer.Stop()
	select {
	case <-stopped:
		return nil
	case <-timer.C:
		return fmt.Errorf("proxy %s -> %s: goroutines still running %v after close", p.Addr(), p.target, proxyStopTimeout)
	}
}

// acceptLoop accepts connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure such as EMFILE: try again shortly.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(pollInterval):
			}
			continue
		}
		pr := &pair{client: conn, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			closeConn(conn, true)
			return
		}
		p.pairs[pr] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(pr)
	}
}

// serve connects pr to the target and forwards both directions until both
// have ended or the pair is closed.
func (p *Proxy) serve(pr *pair) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.pairs, pr)
		p.mu.Unlock()
	}()
	// Under a blackhole the target does not even see the connection yet.
	if !p.waitReleased(pr.done) {
		return
	}
	dialer := net.Dialer{Timeout: proxyDialTimeout}
	server, err := dialer.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		pr.close(true)
		return
	}
	if !pr.setServer(server) {
		closeConn(server, true)
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		p.forward(pr, pr.client, server)
	}()
	go func() {
		defer wg.Done()
		p.forward(pr, server, pr.client)
	}()
	wg.Wait()
	pr.close(false) // both directions ended with EOF; no-op after a reset
}

// forward copies src to dst through a queue until src ends (then dst is
// half-closed) or the pair is closed. A reader goroutine fills the queue;
// forward writes it out and waits for the reader before returning.
func (p *Proxy) forward(pr *pair, src, dst net.Conn) {
	queue := make(chan chunk, proxyQueueLen)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		p.read(pr, src, queue)
	}()
	if err := p.write(pr, dst, queue); err != nil {
		pr.close(true) // also unblocks the reader
	}
	<-readerDone
}

// read reads src into queue, stamping each chunk with its due time, and
// closes queue when it stops: at EOF, at a read error (which resets the
// pair), or when the pair is closed.
func (p *Proxy) read(pr *pair, src net.Conn, queue chan<- chunk) {
	defer close(queue)
	buf := make([]byte, proxyChunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			read := time.Now()
			if !p.waitReleased(pr.done) {
				return
			}
			c := chunk{data: append([]byte(nil), buf[:n]...), due: read.Add(p.currentLatency())}
			select {
			case queue <- c:
			case <-pr.done:
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				pr.close(true)
			}
			return
		}
	}
}

// write writes the chunks from queue to dst, each at its due time and only
// while no blackhole is on. When queue is closed and drained it half-closes
// dst. It returns the first write error; nil once the pair is closed.
func (p *Proxy) write(pr *pair, dst net.Conn, queue <-chan chunk) error {
	var timer *time.Timer // created at the first delay
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-queue:
		case <-pr.done:
			return nil
		}
		if !ok {
			if pr.isClosed() {
				return nil
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				return tc.CloseWrite()
			}
			return nil
		}
		if wait := time.Until(c.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait) // no stale tick since Go 1.23
			}
			select {
			case <-timer.C:
			case <-pr.done:
				return nil
			}
		}
		if !p.waitReleased(pr.done) {
			return nil
		}
		if _, err := dst.Write(c.data); err != nil {
			if pr.isClosed() {
				return nil
			}
			return err
		}
	}
}

// waitReleased waits while a blackhole is on. It reports false if done was
// closed first.
func (p *Proxy) waitReleased(done <-chan struct{}) bool {
	for {
		p.mu.Lock()
		if !p.holding {
			p.mu.Unlock()
			return true
		}
		released := p.released
		p.mu.Unlock()
		select {
		case <-released:
		case <-done:
			return false
		}
	}
}

func (p *Proxy) currentLatency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency
}
