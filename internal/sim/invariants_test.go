package sim

import (
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// TestInvariants writes states that break each invariant, and one that
// breaks none, and wants each found, no more: the hash naming two owners,
// an owner queued twice, the queue and Redisson's zset apart, a live
// liveness entry of an owner not queued, the token counter going down.
func TestInvariants(t *testing.T) {
	const name = "inv"
	k := lockKeys(name)
	hash, queue, timeouts, alive, token := k[0], k[1], k[2], k[3], k[4]
	far := "99999999999999" // a liveness deadline far ahead of the server's clock
	cases := []struct {
		name  string
		state [][]string
		want  string // in the one broken invariant; "" for none
	}{
		{"a consistent queue", [][]string{
			{"HSET", hash, "c:1", "1"}, {"RPUSH", queue, "c:2", "c:3"},
			{"ZADD", timeouts, "1", "c:2", "2", "c:3"}, {"ZADD", alive, far, "c:2", "0", "c:9"}, {"SET", token, "7"},
		}, ""},
		{"two owners", [][]string{{"HSET", hash, "c:1", "1", "c:2", "1"}}, "names 2 owners"},
		{"queued twice", [][]string{{"RPUSH", queue, "c:2", "c:2"}, {"ZADD", timeouts, "1", "c:2"}}, "queued twice"},
		{"queued without a timeout", [][]string{{"RPUSH", queue, "c:2"}}, "without a timeout entry"},
		{"a timeout not queued", [][]string{{"ZADD", timeouts, "1", "c:2"}}, "not queued"},
		{"a live entry not queued", [][]string{{"ZADD", alive, far, "c:2"}}, "live liveness entry"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			broken := checkState(t, name, c.state)
			switch {
			case c.want == "" && len(broken) > 0:
				t.Errorf("found broken: %q", broken)
			case c.want != "" && (len(broken) != 1 || !strings.Contains(broken[0], c.want)):
				t.Errorf("found %q, want one %q", broken, c.want)
			}
		})
	}
	t.Run("the token counter goes down", func(t *testing.T) {
		srv := miniredis.RunT(t)
		e, err := installScripting(srv)
		if err != nil {
			t.Fatal(err)
		}
		inv := NewInvariants([]string{name})
		srv.Set(token, "9")
		e.Inspect(inv.Check)
		srv.Del(token) // to nothing: allowed
		e.Inspect(inv.Check)
		srv.Set(token, "8")
		e.Inspect(inv.Check)
		if _, broken := inv.Result(); len(broken) != 1 || !strings.Contains(broken[0], "went down from 9 to 8") {
			t.Errorf("found %q, want the counter's going down from 9 to 8", broken)
		}
	})
}

// checkState writes state to a fresh server and returns what one check
// of the lock name finds broken.
func checkState(t *testing.T, name string, state [][]string) []string {
	t.Helper()
	srv := miniredis.RunT(t)
	e, err := installScripting(srv)
	if err != nil {
		t.Fatal(err)
	}
	e.Inspect(func(do CommandFunc) {
		for _, cmd := range state {
			if _, err := do(cmd...); err != nil {
				t.Fatalf("%v: %v", cmd, err)
			}
		}
	})
	inv := NewInvariants([]string{name})
	e.Inspect(inv.Check)
	checks, broken := inv.Result()
	if checks != 1 {
		t.Fatalf("%d checks, want 1", checks)
	}
	return broken
}
