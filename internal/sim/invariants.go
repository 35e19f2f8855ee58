package sim

import (
	"bufio"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Invariants checks each lock's keys in one atomic step on the server,
// independent of what any client believes: the hash names one owner at
// most; the queue has no owner twice; the queue and Redisson's timeout
// zset hold the same owners; every fairlock liveness entry whose deadline
// has not passed (and is not the mark 0 of an owner that left) is a
// queued owner - Redisson's purge drops an entry from the queue and its
// own zset only and leaves the mark behind (prelude.lua, B9); a lock's
// token counter never goes down (but to nothing: forgetAll). It runs in
// Go, reading the keys with the server's own commands under its lock.
type Invariants struct {
	locks [][]string // each lock's five keys

	mu     sync.Mutex
	checks int
	broken []string
	tokens map[string]int64
}

// lockKeys returns the five keys of a lock named name (no braces), as
// lock/internal/wire derives them (RULES.md's keyspace table).
func lockKeys(name string) []string {
	tag := "{" + name + "}"
	return []string{name, "redisson_lock_queue:" + tag, "redisson_lock_timeout:" + tag,
		"fairlock_lock_alive:" + tag, "redisson_lock_token:" + tag}
}

// NewInvariants checks the locks named.
func NewInvariants(names []string) *Invariants {
	inv := &Invariants{tokens: map[string]int64{}}
	for _, n := range names {
		inv.locks = append(inv.locks, lockKeys(n))
	}
	return inv
}

// Check reads the locks' keys with do (one state: the caller holds the
// server's lock) and records what it finds broken.
func (inv *Invariants) Check(do CommandFunc) { inv.CheckKeys(do, nil) }

// CheckKeys checks, as Check does, the locks named by keys (a script's
// KEYS: a lock's name, or a key with its hash tag), all with nil.
func (inv *Invariants) CheckKeys(do CommandFunc, keys []string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.checks++
	now, err := serverMillis(do)
	if err != nil {
		inv.broken = append(inv.broken, "TIME: "+err.Error())
		return
	}
	for _, lk := range inv.locks {
		if keys == nil || names(keys, lk[0]) {
			inv.checkLock(do, lk, now)
		}
	}
}

// names: one of keys is the lock name or carries its hash tag.
func names(keys []string, name string) bool {
	for _, k := range keys {
		if k == name || strings.Contains(k, "{"+name+"}") {
			return true
		}
	}
	return false
}

func (inv *Invariants) checkLock(do CommandFunc, keys []string, now float64) {
	hash, queue, timeouts, alive, token := keys[0], keys[1], keys[2], keys[3], keys[4]
	bad := func(format string, args ...any) { inv.broken = append(inv.broken, fmt.Sprintf(format, args...)) }
	if owners, err := strs(do("HKEYS", hash)); err == nil && len(owners) > 1 {
		bad("%s: the hash names %d owners: %s", hash, len(owners), strings.Join(owners, ","))
	}
	q, errQ := strs(do("LRANGE", queue, "0", "-1"))
	zt, errT := strs(do("ZRANGE", timeouts, "0", "-1"))
	live, errL := strs(do("ZRANGE", alive, "0", "-1", "WITHSCORES"))
	if err := firstErr(errQ, errT, errL); err != nil {
		bad("%s: %v", hash, err)
		return
	}
	inq := map[string]bool{}
	for _, o := range q {
		if inq[o] {
			bad("%s: %s queued twice", queue, o)
		}
		inq[o] = true
		if !slices.Contains(zt, o) {
			bad("%s: %s queued without a timeout entry", queue, o)
		}
	}
	for _, o := range zt {
		if !inq[o] {
			bad("%s: %s has a timeout entry but is not queued", timeouts, o)
		}
	}
	for j := 0; j+1 < len(live); j += 2 {
		o, deadline := live[j], live[j+1]
		d, _ := strconv.ParseFloat(deadline, 64)
		if !inq[o] && d != 0 && d > now {
			bad("%s: %s has a live liveness entry (deadline %s, now %.0f) but is not queued", alive, o, deadline, now)
		}
	}
	inv.checkToken(do, hash, token)
}

// checkToken: a lock's token counter never goes down (to nothing
// excepted: forgetAll deletes it).
func (inv *Invariants) checkToken(do CommandFunc, hash, key string) {
	res, err := do("GET", key)
	if err != nil {
		inv.broken = append(inv.broken, fmt.Sprintf("%s: %v", key, err))
		return
	}
	s, _ := res.(string)
	v, _ := strconv.ParseInt(s, 10, 64)
	if v != 0 && v < inv.tokens[hash] {
		inv.broken = append(inv.broken, fmt.Sprintf("%s: the token counter went down from %d to %d", hash, inv.tokens[hash], v))
	}
	if v > inv.tokens[hash] {
		inv.tokens[hash] = v
	}
}

// serverMillis is the server's clock (TIME) in milliseconds.
func serverMillis(do CommandFunc) (float64, error) {
	t, err := strs(do("TIME"))
	if err != nil || len(t) != 2 {
		return 0, fmt.Errorf("TIME answered %q, %v", t, err)
	}
	sec, err1 := strconv.ParseInt(t[0], 10, 64)
	usec, err2 := strconv.ParseInt(t[1], 10, 64)
	if err := firstErr(err1, err2); err != nil {
		return 0, err
	}
	return float64(sec*1000 + usec/1000), nil
}

// strs converts an array reply of strings (nil: an empty one).
func strs(res any, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	items, _ := res.([]any)
	out := make([]string, 0, len(items))
	for _, x := range items {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("%w: %T in an array of strings", errFrame, x)
		}
		out = append(out, s)
	}
	return out, nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Result returns how many checks ran and what they found broken.
func (inv *Invariants) Result() (int, []string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.checks, append([]string(nil), inv.broken...)
}

// bulkStrings decodes a RESP2 array of bulk strings (or an error reply).
func bulkStrings(frame []byte) ([]string, error) {
	r := bufio.NewReader(strings.NewReader(string(frame)))
	head, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if head[0] == '-' {
		return nil, fmt.Errorf("sim: server error: %s", strings.TrimSpace(head[1:]))
	}
	if head[0] != '*' {
		return nil, fmt.Errorf("%w: want an array, got %q", errFrame, head)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return nil, fmt.Errorf("%w: %q", errFrame, head)
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		l, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(l[1:]))
		if err != nil || l[0] != '$' {
			return nil, fmt.Errorf("%w: %q", errFrame, l)
		}
		buf := make([]byte, size+2)
		if _, err := ioReadFull(r, buf); err != nil {
			return nil, err
		}
		out = append(out, string(buf[:size]))
	}
	return out, nil
}
