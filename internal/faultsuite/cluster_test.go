package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/goredisbackend"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/fairlock/fairlock/valkeybackend"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/valkey-io/valkey-go"
)

// dialer makes a backend of one adapter.
type dialer struct {
	name string
	dial func() (backend.Backend, error)
}

// dialersFor returns the suite's adapters seeded with addrs: as cluster
// clients if cluster, else as clients of the one server at addrs[0].
func dialersFor(addrs []string, cluster bool) []dialer {
	return []dialer{
		{"rueidis", func() (backend.Backend, error) {
			return rueidisbackend.Dial(rueidis.ClientOption{InitAddress: addrs})
		}},
		{"valkey-go", func() (backend.Backend, error) {
			return valkeybackend.Dial(valkey.ClientOption{InitAddress: addrs})
		}},
		{"go-redis", func() (backend.Backend, error) {
			return goredisbackend.Dial(&redis.UniversalOptions{Addrs: addrs, IsClusterMode: cluster, ContextTimeoutEnabled: true}), nil
		}},
	}
}

// clientOf returns a lock client on a new backend of a; it closes at
// cleanup if the test has not closed it.
func clientOf(t testing.TB, a dialer, opts ...lock.Option) *lock.Client {
	t.Helper()
	b, err := a.dial()
	if err != nil {
		t.Fatalf("%s: %v", a.name, err)
	}
	c, err := lock.NewClient(b, opts...)
	if err != nil {
		t.Fatalf("%s: lock.NewClient: %v", a.name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// redirection matches the cluster errors a script may meet while slots
// move or a primary fails over, which the lock (or the client library)
// must retry and never hand to its caller.
var redirection = regexp.MustCompile(`\b(MOVED|ASK|TRYAGAIN|CLUSTERDOWN)\b`)

// errorTally counts the errors Lock and Unlock returned, by text.
type errorTally struct {
	mu sync.Mutex
	by map[string]int
}

func (e *errorTally) add(what string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.by == nil {
		e.by = map[string]int{}
	}
	s := shortErr(err)
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	e.by[what+": "+s]++
}

// redirections returns the errors that carried a cluster redirection.
func (e *errorTally) redirections() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for s := range e.by {
		if redirection.MatchString(s) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func (e *errorTally) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.by) == 0 {
		return "none"
	}
	var out []string
	for s, n := range e.by {
		out = append(out, fmt.Sprintf("%dx %q", n, s))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// merge adds o's counts to e.
func (e *errorTally) merge(o *errorTally) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.by == nil {
		e.by = map[string]int{}
	}
	for s, n := range o.by {
		e.by[s] += n
	}
}

// checkNoRedirections fails t if an error that reached the caller carried
// a cluster redirection.
func (e *errorTally) checkNoRedirections(t testing.TB) {
	t.Helper()
	if r := e.redirections(); len(r) > 0 {
		t.Errorf("cluster errors reached the caller: %v", r)
	}
}

// belief is one hold as its client saw it: from Lock returning to the
// Unlock call (or to Done closing, when the hold was lost first).
type belief struct {
	worker   int
	from, to time.Time
	token    int64
}

// doubleBeliefs counts the pairs of holds of different owners whose
// beliefs overlap, and the longest overlap.
func doubleBeliefs(bs []belief) (pairs int, worst time.Duration) {
	bs = slices.Clone(bs)
	slices.SortFunc(bs, func(a, b belief) int { return a.from.Compare(b.from) })
	for i, b := range bs {
		for _, a := range bs[:i] {
			if a.worker != b.worker && a.to.After(b.from) {
				pairs++
				end := a.to
				if b.to.Before(end) {
					end = b.to
				}
				worst = max(worst, end.Sub(b.from))
			}
		}
	}
	return pairs, worst
}

// tokenRegressions counts the holds, in the order they began, whose
// fencing token was not above every earlier one's.
func tokenRegressions(bs []belief) int {
	bs = slices.Clone(bs)
	slices.SortFunc(bs, func(a, b belief) int { return a.from.Compare(b.from) })
	var top int64
	n := 0
	for _, b := range bs {
		if b.token <= top {
			n++
		}
		top = max(top, b.token)
	}
	return n
}

// holderSampler reads the lock hash (HGETALL, through its own rueidis
// cluster client, which follows MOVED and ASK) every 2 ms and counts the
// samples that name more than one owner: two holders on the server.
type holderSampler struct {
	stop chan struct{}
	done chan struct{}

	samples, failed, doubles int
	example                  map[string]string
}

func sampleHolders(t *testing.T, addrs []string, key string) *holderSampler {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	s := &holderSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer rc.Close()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			fields, err := rc.Do(ctx, rc.B().Hgetall().Key(key).Build()).AsStrMap()
			cancel()
			if err != nil {
				s.failed++
				continue
			}
			s.samples++
			if len(fields) > 1 {
				s.doubles++
				s.example = fields
			}
		}
	}()
	t.Cleanup(s.end)
	return s
}

// end stops the sampler and waits for it; its counts are final then.
func (s *holderSampler) end() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *holderSampler) String() string {
	return fmt.Sprintf("%d server samples with two holders of %d (%d reads failed)", s.doubles, s.samples, s.failed)
}

// waitFor polls cond every 5 ms until it holds (true) or within has
// passed (false).
func waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// otherPrimary returns a running primary of c other than p.
func otherPrimary(t *testing.T, c *redistest.Cluster, p *redistest.Server) *redistest.Server {
	t.Helper()
	for _, q := range c.Primaries(t) {
		if q != p {
			return q
		}
	}
	t.Fatalf("no primary besides %s", p.Addr())
	return nil
}

func msf(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

// percentile returns the p-th percentile (0-100) of ds.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// errNotSupported reports whether err says the backend cannot do it.
func errNotSupported(err error) bool { return errors.Is(err, backend.ErrNotSupported) }

// errorStats sums the error replies the nodes gave, by code (INFO
// errorstats: MOVED, ASK, TRYAGAIN, CLUSTERDOWN, ...).
func errorStats(t *testing.T, nodes []*redistest.Server) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, n := range nodes {
		info, _ := n.Do(t, "INFO", "errorstats").(string)
		for line := range strings.SplitSeq(info, "\n") {
			code, rest, ok := strings.Cut(strings.TrimSpace(line), ":count=")
			if !ok {
				continue
			}
			var c int64
			fmt.Sscan(rest, &c)
			out[strings.TrimPrefix(code, "errorstat_")] += c
		}
	}
	return out
}

// redirectionsSince returns how many cluster errors of each kind the
// nodes answered since before was taken.
func redirectionsSince(t *testing.T, nodes []*redistest.Server, before map[string]int64) map[string]int64 {
	t.Helper()
	after := errorStats(t, nodes)
	out := map[string]int64{}
	for _, code := range redirectionCodes {
		out[code] = after[code] - before[code]
	}
	return out
}

var redirectionCodes = []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"}

// formatRedirections formats counts by redirection code.
func formatRedirections(m map[string]int64) string {
	var out []string
	for _, code := range redirectionCodes {
		out = append(out, fmt.Sprintf("%s %d", code, m[code]))
	}
	return strings.Join(out, ", ")
}

// TestClusterShardSubscriptionsAtPrimaries: every adapter's sharded
// subscriptions sit at the primary that owns their slot, never at a
// replica, found there from the cluster's slot map (pubsub.SlotMap). A
// replica accepts SSUBSCRIBE for its primary's slots, and its subscribers
// hear each SPUBLISH only after it crossed the cluster bus - up to 40 ms
// late on Redis 7.0 (Nagle's algorithm on the bus links,
// docs/adapters.md).
func TestClusterShardSubscriptionsAtPrimaries(t *testing.T) {
	c := redistest.StartCluster(t, 3, redistest.WithReplicas(1))
	channels := make([]string, 24) // over 24 slots, 8 a primary on average
	for i := range channels {
		channels[i] = fmt.Sprintf("fault:ssub:{%d}", i)
	}
	for _, a := range dialersFor(c.Addrs(), true) {
		t.Run(a.name, func(t *testing.T) {
			b, err := a.dial()
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			ss, ok := b.(backend.ShardedSubscriber)
			if !ok || !ss.Sharded() {
				t.Fatalf("%s: no sharded subscriptions on a cluster client", a.name)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, ch := range channels {
				s, err := ss.SSubscribe(ctx, ch)
				if err != nil {
					t.Fatalf("SSUBSCRIBE %s: %v", ch, err)
				}
				defer s.Close()
			}
			at := map[string]int{}
			for _, ch := range channels {
				owner := c.PrimaryForSlot(t, redistest.SlotOf(ch))
				if n := shardNumSub(t, owner, ch); n != 1 {
					t.Errorf("%s: %d subscribers at its primary %s, want 1", ch, n, owner.Addr())
				}
				for _, r := range c.ReplicasOf(t, owner) {
					if n := shardNumSub(t, r, ch); n != 0 {
						t.Errorf("%s: %d subscribers at the replica %s (of %s), want 0", ch, n, r.Addr(), owner.Addr())
					}
				}
				at[owner.Addr()]++
			}
			t.Logf("figures: %d channels; sharded subscriptions by primary %v", len(channels), at)
		})
	}
}

// shardNumSub returns the subscribers node has for channel (PUBSUB
// SHARDNUMSUB, which counts the node's own clients only).
func shardNumSub(t *testing.T, node *redistest.Server, channel string) int64 {
	t.Helper()
	reply, _ := node.Do(t, "PUBSUB", "SHARDNUMSUB", channel).([]any)
	if len(reply) != 2 {
		t.Fatalf("PUBSUB SHARDNUMSUB %s at %s: %v", channel, node.Addr(), reply)
	}
	n, _ := reply[1].(int64)
	return n
}
