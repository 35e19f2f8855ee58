package soak

// Reproductions of soak seed 11's two "exclusion" violations (the
// histories in /tmp/base11/soak-11.txt, "=== exclusion at 165844.5ms" on
// soak:s0 and "=== exclusion at 165937.6ms" on soak:s1).
//
// What happened (s0), step by step, with d = 99 ms the latency the
// nemesis put on the Java proxy (every Java call of one round trip in the
// fault window took 197.5-198.7 ms):
//
//  1. Java 91562c64:1 unlocks (Redisson script 3, sent 165250.7, run
//     ~165350): DEL of the hash, "0" to the head, Java dc7f2cc5:1.
//  2. dc7f2cc5:1 gets the "0" ~165449, runs script 2 (at the server
//     ~165548): hash absent and it is the head -> HSET its field 1,
//     PEXPIRE 5000, LPOP. The lock is the Java thread's; the reply is on
//     its way for d.
//  3. ForceUnlock by a fairlock client, [165715.8, 165721.7]: DEL removes
//     the Java hold (removed=true: no Go owner held s0 then) and
//     hand_over_to grants the head, Go 9ba0e518:100 (field 0, token ...491).
//  4. 9ba0e518 unlocks [165824.8, 165826.2]: hand_over_to grants Go
//     68cc9cbe:100 (token ...492), which holds until ~167148.
//  5. The Java client has had its reply since ~165647, but LockWithLease
//     returns only after its deferred Subscription.Close, whose UNSUBSCRIBE
//     is one more round trip through the slowed proxy (2d): it returns at
//     165844.5 = 165548 + d + 2d. The soak records the Java hold as
//     granted then - 18 ms after 68cc9cbe's grant - and its checker
//     (checkExclusion) calls that two holders, though the server never had
//     two: the Java hold was force-unlocked 120 ms before its caller heard
//     of it. Its later unlock says "not locked by current thread" (the
//     hash exists, without its field): Redisson learns of a forceUnlock
//     only at its next renewal or unlock (RULES.md X16), the model has no
//     renewal.
//
// s1 is the same: Java 91562c64:2's script 2 ran before the ForceUnlock
// [165715.9, 165722.1] (removed=true, no Go holder), which granted Go
// 6fd53b46:101; the tryLock returned at 165937.6.
//
// TestSoakRepro_ForceUnlockedJavaGrantReplyLate replays that on a real
// server: the mutual exclusion on the server is checked all along (it
// holds), and the recorded history is given to the soak's checker, which
// reports the false violation. TestSoakRepro_CheckerSeed11Exclusion gives
// the checker seed 11's own figures, without a server.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/internal/redisson"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/redis/go-redis/v9"
)

// hashMonitor polls the lock hash (HGETALL on its own connection, no
// proxy) until stopped, and keeps every distinct set of fields it saw, in
// order, and any snapshot with more than one field (two holders on the
// server).
type hashMonitor struct {
	mu     sync.Mutex
	states []string // distinct successive field sets, "a,b" ("" free)
	double []string // snapshots with two or more fields
	stop   chan struct{}
	done   chan struct{}
}

func watchHash(raw *redis.Client, key string, label func(string) string) *hashMonitor {
	m := &hashMonitor{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(500 * time.Microsecond)
		defer tick.Stop()
		last := "-"
		for {
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
			fields, err := raw.HGetAll(context.Background(), key).Result()
			if err != nil {
				continue
			}
			var names []string
			for f, v := range fields {
				names = append(names, label(f)+"="+v)
			}
			slices.Sort(names)
			s := strings.Join(names, ",")
			m.mu.Lock()
			if s != last {
				m.states = append(m.states, s)
				last = s
			}
			if len(fields) > 1 {
				m.double = append(m.double, s)
			}
			m.mu.Unlock()
		}
	}()
	return m
}

func (m *hashMonitor) finish() (states, double []string) {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.states, m.double
}

// waitFor polls cond every millisecond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestSoakRepro_ForceUnlockedJavaGrantReplyLate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const name = "soakrepro:s0"
	queueKey := "redisson_lock_queue:{" + name + "}"

	srv := redistest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer raw.Close()
	h := NewHistory(11)

	// Go clients straight to the server (no fault on them, as in the
	// soak); the Java client (rueidis, as the soak's) behind a proxy.
	goAdapter := Adapters[3] // go-redis, as 9ba0e518 and 68cc9cbe
	newClient := func() *lock.Client {
		b, err := goAdapter.Dial(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c, err := lock.NewClient(b, lock.WithLease(15*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ca, cb, cc, cadmin := newClient(), newClient(), newClient(), newClient()
	mutex := func(c *lock.Client) *lock.Mutex {
		m, err := c.NewMutex(name)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ma, mb, mc, madmin := mutex(ca), mutex(cb), mutex(cc), mutex(cadmin)

	jp, jl := javaBehindProxy(t, srv.Addr(), name)

	labels := map[string]string{ma.Owner(): "A", mb.Owner(): "B", mc.Owner(): "C", jl.Field: "Java"}
	mon := watchHash(raw, name, func(f string) string {
		if l, ok := labels[f]; ok {
			return l
		}
		return short(f)
	})

	// goHold records a Go hold and when its Done closes.
	goHold := func(m *lock.Mutex, label string, hold *lock.Hold, at time.Duration) *Hold {
		hd := &Hold{Lock: name, Owner: m.Owner(), Client: label, Token: hold.Token(), Acquired: at, Watches: goAdapter.Watches}
		h.AddHold(hd)
		go func() {
			<-hold.Done()
			hd.End(h.Now(), hold.Err())
		}()
		return hd
	}
	type acq struct {
		hold *lock.Hold
		err  error
		at   time.Duration
	}
	goLock := func(m *lock.Mutex) (time.Duration, <-chan acq) {
		ch := make(chan acq, 1)
		call := h.Now()
		go func() {
			hold, err := m.Lock(ctx)
			ch <- acq{hold, err, h.Now()}
		}()
		return call, ch
	}
	recv := func(what string, ch <-chan acq) acq {
		t.Helper()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("%s: %v", what, r.err)
			}
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return", what)
		}
		return acq{}
	}
	unlock := func(m *lock.Mutex, hd *Hold, label string) {
		op := &Op{Kind: KindUnlock, Lock: name, Owner: m.Owner(), Client: label, Hold: hd}
		op.Call = h.Now()
		hd.Releasing(op.Call)
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("%s Unlock: %v", label, err)
		}
		op.Return = h.Now()
		h.Add(op)
	}
	queue := func() []string {
		q, _ := raw.LRange(ctx, queueKey, 0, -1).Result()
		return q
	}

	// A holds; the Java thread queues first, then Go owners B and C.
	callA, chA := goLock(ma)
	ra := recv("A's Lock", chA)
	hdA := goHold(ma, "go-redis#A", ra.hold, ra.at)
	h.Add(&Op{Kind: KindLock, Lock: name, Owner: ma.Owner(), Client: "go-redis#A", Call: callA, Return: ra.at, Hold: hdA, New: true})

	jop := &Op{Kind: KindJavaLock, Lock: name, Owner: jl.Field, Client: "java", Java: true}
	jop.Call = h.Now()
	jdone := make(chan error, 1)
	go func() { jdone <- jl.LockWithLease(ctx, 5*time.Second) }()
	waitFor(t, "the Java thread queued", func() bool { return slices.Equal(queue(), []string{jl.Field}) })

	callB, chB := goLock(mb)
	waitFor(t, "B queued", func() bool { return len(queue()) == 2 })
	queuedB := h.Now()
	callC, chC := goLock(mc)
	waitFor(t, "C queued", func() bool { return len(queue()) == 3 })
	queuedC := h.Now()
	if q := queue(); !slices.Equal(q, []string{jl.Field, mb.Owner(), mc.Owner()}) {
		t.Fatalf("queue %v, want Java, B, C", q)
	}

	// The fault: the Java connection slowed by 99 ms each way, seed 11's
	// value. It is the window: the Java thread's "0", its script 2 and
	// the reply each take 99 ms through the proxy.
	jp.SetLatency(99 * time.Millisecond)

	// Step 1: A's release wakes the Java head ("0"; Redisson heads are
	// only woken, hand_over_to).
	unlock(ma, hdA, "go-redis#A")

	// Step 2: the Java thread's script 2 takes the free lock. Seen on the
	// server, the reply is still in the proxy for 99 ms: the blackhole now
	// holds it there until released, so the steps below come before the
	// Java caller hears "acquired" whatever the machine's speed.
	waitFor(t, "the Java thread's script 2 to take the lock", func() bool {
		v, err := raw.HGet(ctx, name, jl.Field).Result()
		return err == nil && v == "1"
	})
	jp.Blackhole(true)
	javaServerGrant := h.Now()
	select {
	case err := <-jdone:
		t.Fatalf("the Java lock() returned (%v) before the window; raise the latency", err)
	default:
	}
	if n, _ := raw.HLen(ctx, name).Result(); n != 1 {
		t.Fatalf("hash has %d fields after the Java grant, want 1", n)
	}

	// Step 3: a fairlock ForceUnlock removes the Java hold and grants the
	// head, B.
	fop := &Op{Kind: KindForceUnlock, Lock: name, Owner: madmin.Owner(), Client: "go-redis#admin", Limit: 2 * time.Second}
	fop.Call = h.Now()
	var err error
	fop.Released, err = madmin.ForceUnlock(ctx)
	fop.Return = h.Now()
	if err != nil || !fop.Released {
		t.Fatalf("ForceUnlock = %v, %v; want it to remove the Java hold", fop.Released, err)
	}
	h.Add(fop)
	rb := recv("B's Lock", chB)
	hdB := goHold(mb, "go-redis#B", rb.hold, rb.at)
	h.Add(&Op{Kind: KindLock, Lock: name, Owner: mb.Owner(), Client: "go-redis#B", Call: callB, Queued: queuedB, Return: rb.at, Hold: hdB, New: true})

	// Step 4: B's release grants C.
	unlock(mb, hdB, "go-redis#B")
	rc := recv("C's Lock", chC)
	hdC := goHold(mc, "go-redis#C", rc.hold, rc.at)
	h.Add(&Op{Kind: KindLock, Lock: name, Owner: mc.Owner(), Client: "go-redis#C", Call: callC, Queued: queuedC, Return: rc.at, Hold: hdC, New: true})

	// Step 5: the Java reply goes on (latency still on, so LockWithLease's
	// deferred UNSUBSCRIBE costs one more slowed round trip, as in the soak).
	jp.Blackhole(false)
	select {
	case err := <-jdone:
		if err != nil {
			t.Fatalf("Java lock(): %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Java lock() did not return")
	}
	jop.Return = h.Now()
	jp.SetLatency(0)
	hdJ := &Hold{Lock: name, Owner: jl.Field, Client: "java", Java: true, Acquired: jop.Return, Lease: 5 * time.Second}
	h.AddHold(hdJ)
	jop.Hold, jop.New = hdJ, true
	h.Add(jop)

	// Who believes it holds: the Java caller (lock() returned nil) and C
	// (its Hold is live). Who holds on the server: C alone.
	fields, _ := raw.HGetAll(ctx, name).Result()
	t.Logf("after the Java lock() returned: C's hold err=%v; hash %v", rc.hold.Err(), fields)
	if rc.hold.Err() != nil {
		t.Fatalf("C's hold ended: %v", rc.hold.Err())
	}
	if len(fields) != 1 || fields[mc.Owner()] == "" {
		t.Errorf("hash %v, want C's field only", fields)
	}
	js, err := jl.Read(ctx)
	t.Logf("Redisson's own read for the Java thread: %+v (%v)", js, err)

	// The Java unlock finds the hash without its field; C releases
	// normally.
	uj := &Op{Kind: KindJavaUnlock, Lock: name, Owner: jl.Field, Client: "java", Java: true, Hold: hdJ}
	uj.Call = h.Now()
	hdJ.Releasing(uj.Call)
	jerr := jl.Unlock(ctx)
	uj.Return = h.Now()
	hdJ.End(uj.Return, nil)
	if jerr != nil {
		uj.Err = jerr.Error()
	}
	h.Add(uj)
	if !errors.Is(jerr, redisson.ErrNotHeld) {
		t.Errorf("Java unlock: %v, want ErrNotHeld (its hold was force-unlocked)", jerr)
	}
	// C holds on past the checker's notice bound (1 s after the Java
	// acquire returned), as 68cc9cbe did (1.3 s): a holder told within
	// the bound would pass the checker. This wait is the hold's length,
	// not a synchronisation.
	select {
	case <-rc.hold.Done():
		t.Fatalf("C's hold ended: %v", rc.hold.Err())
	case <-time.After(jop.Return + DefaultBounds(15*time.Second).Notice + 300*time.Millisecond - h.Now()):
	}
	unlock(mc, hdC, "go-redis#C")
	waitFor(t, "C's Done", func() bool { d, _ := hdC.Done(); return d > 0 })

	states, double := mon.finish()
	t.Logf("lock hash over time (one poll every 0.5 ms): %q", states)
	t.Logf("Java script 2 seen on the server at %s; its lock() returned at %s", ms(javaServerGrant), ms(jop.Return))
	if len(double) > 0 {
		t.Errorf("two holders on the server at once: %q", double)
	}

	// The soak's checker on this history.
	rep := Check(h, DefaultBounds(15*time.Second))
	for _, v := range rep.Violations {
		if v.Check == "exclusion" {
			t.Errorf("checker: %v\n%s", v, Slice(h, v))
		} else {
			t.Logf("other violation: %v", v)
		}
	}
}

// TestSoakRepro_CheckerSeed11Exclusion is seed 11's soak:s0 slice as the
// checker saw it (times in ms from the soak file): the Java lock() that
// returned at 165844.5 was granted on the server at ~165548 and ended by
// the ForceUnlock at [165715.8, 165721.7]; 9ba0e518 and 68cc9cbe held
// after it. A history with no two holders at any instant; the checker
// must not report exclusion.
func TestSoakRepro_CheckerSeed11Exclusion(t *testing.T) {
	at := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	h := NewHistory(11)
	h.AddFault(Fault{Kind: FaultLatency, Target: "java", Start: at(165200.3), End: at(166428.5)})
	goHold := func(owner, client string, token int64, acquired, unlockCall, done float64) *Hold {
		hd := &Hold{Lock: "soak:s0", Owner: owner, Client: client, Token: token, Acquired: at(acquired), Watches: true}
		hd.Releasing(at(unlockCall))
		hd.End(at(done), lock.ErrReleased)
		h.AddHold(hd)
		return hd
	}
	// The Java hold before: 91562c64:1, released at [165250.7, 165448.2].
	j0 := &Hold{Lock: "soak:s0", Owner: "91562c64-0000:1", Client: "java", Java: true, Acquired: at(165008.4), Lease: 5 * time.Second}
	j0.Releasing(at(165250.7))
	j0.End(at(165448.2), nil)
	h.AddHold(j0)
	h.Add(&Op{Kind: KindJavaLock, Lock: "soak:s0", Owner: j0.Owner, Client: "java", Java: true, Call: at(163751.2), Return: at(165008.4), Hold: j0, New: true})
	h.Add(&Op{Kind: KindJavaUnlock, Lock: "soak:s0", Owner: j0.Owner, Client: "java", Java: true, Call: at(165250.7), Return: at(165448.2), Hold: j0})

	h.Add(&Op{Kind: KindForceUnlock, Lock: "soak:s0", Owner: "6fd53b46-0000:1", Client: "rueidis#0", Call: at(165715.8), Return: at(165721.7), Released: true, Limit: 2 * time.Second})
	g1 := goHold("9ba0e518-0000:100", "go-redis-new#4", 1795840826896491, 165720.6, 165824.8, 165826.3)
	h.Add(&Op{Kind: KindLockLease, Lock: "soak:s0", Owner: g1.Owner, Client: g1.Client, Call: at(164665.6), Queued: at(164666.5), Return: at(165720.6), Hold: g1, New: true})
	h.Add(&Op{Kind: KindUnlock, Lock: "soak:s0", Owner: g1.Owner, Client: g1.Client, Call: at(165824.8), Return: at(165826.2), Hold: g1})
	g2 := goHold("68cc9cbe-0000:100", "go-redis#3", 1795840826896492, 165826.1, 167148.1, 167148.3)
	h.Add(&Op{Kind: KindLock, Lock: "soak:s0", Owner: g2.Owner, Client: g2.Client, Call: at(164823.5), Queued: at(164825.0), Return: at(165826.1), Hold: g2, New: true})

	jh := &Hold{Lock: "soak:s0", Owner: "dc7f2cc5-0000:1", Client: "java", Java: true, Acquired: at(165844.5), Lease: 5 * time.Second}
	jh.Releasing(at(166124.0))
	jh.End(at(166322.7), nil)
	h.AddHold(jh)
	h.Add(&Op{Kind: KindJavaLock, Lock: "soak:s0", Owner: jh.Owner, Client: "java", Java: true, Call: at(163821.8), Return: at(165844.5), Hold: jh, New: true})
	h.Add(&Op{Kind: KindJavaUnlock, Lock: "soak:s0", Owner: jh.Owner, Client: "java", Java: true, Call: at(166124.0), Return: at(166322.7), Hold: jh,
		Err: fmt.Sprintf("%v (lock soak:s0, thread %s)", redisson.ErrNotHeld, jh.Owner)})

	for _, v := range Check(h, DefaultBounds(15*time.Second)).Violations {
		if v.Check == "exclusion" {
			t.Errorf("checker: %v", v)
		}
	}
}

// TestSoakRepro_CheckerStillFlagsJavaOverlapWithoutAnEnd is the control
// for a fix of the checker: a Java acquire returning while a Go hold is
// live, with no hold-ending call on the lock that could have ended the
// Java hold before the Go one began, is still two holders. It passes
// before and after such a fix.
func TestSoakRepro_CheckerStillFlagsJavaOverlapWithoutAnEnd(t *testing.T) {
	h := NewHistory(1)
	g := hold("L", "go", 1, 100*msec, 2*time.Second)
	g.Releasing(2 * time.Second)
	acquire(h, g, 50*msec)
	// A force unlock long before the Java call: it cannot have ended the
	// Java hold.
	h.Add(&Op{Kind: KindForceUnlock, Lock: "L", Call: 10 * msec, Return: 20 * msec, Released: true})
	// And one after the Go hold began: it cannot have made room for it.
	h.Add(&Op{Kind: KindForceUnlock, Lock: "L", Call: 150 * msec, Return: 160 * msec, Released: false})
	jh := &Hold{Lock: "L", Owner: "java:1", Client: "java", Java: true, Acquired: 300 * msec, Lease: 5 * time.Second}
	h.AddHold(jh)
	h.Add(&Op{Kind: KindJavaLock, Lock: "L", Owner: "java:1", Client: "java", Java: true, Call: 30 * msec, Return: 300 * msec, Hold: jh, New: true})
	if got := checks(h)["exclusion"]; got != 1 {
		t.Errorf("a Java acquire overlapping a live Go hold with nothing ending it: %d exclusion violations, want 1", got)
	}
}

// javaBehindProxy returns a Redisson-model lock on name for thread 1, its
// client connected to addr through a loopback proxy that can delay or cut
// its traffic; both close with t.
func javaBehindProxy(t *testing.T, addr, name string) (*redistest.Proxy, *redisson.Lock) {
	t.Helper()
	jp := redistest.StartProxy(t, addr)
	jb, err := Adapters[0].Dial(jp.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = jb.Close() })
	jc, err := redisson.New(jb.(redisson.Backend), false)
	if err != nil {
		t.Fatal(err)
	}
	return jp, jc.Lock(name, 1)
}
