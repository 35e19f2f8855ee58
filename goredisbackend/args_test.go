package goredisbackend

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestEvalCmd checks that evalCmd builds the command go-redis' own Eval
// builds: the same arguments, of the same types, printed alike, also
// after collections that would reclaim memory they still use.
func TestEvalCmd(t *testing.T) {
	keys := []string{"lock", "{lock}:queue"}
	args := []string{"c:1", "30000", "", strings.Repeat("x", 100)}
	want := redis.NewCmd(context.Background(), "evalsha", "abc", 2, "lock", "{lock}:queue", "c:1", "30000", "", strings.Repeat("x", 100))
	got := evalCmd(context.Background(), "evalsha", strings.Clone("abc"), keys, args)
	for range 3 {
		runtime.GC()
	}
	if len(got.Args()) != len(want.Args()) {
		t.Fatalf("%d arguments, want %d", len(got.Args()), len(want.Args()))
	}
	for i, w := range want.Args() {
		if g := got.Args()[i]; g != w || fmt.Sprintf("%T %v", g, g) != fmt.Sprintf("%T %v", w, w) {
			t.Errorf("argument %d: %T %v, want %T %v", i, g, g, w, w)
		}
		if s, ok := got.Args()[i].(string); ok && s != want.Args()[i].(string) {
			t.Errorf("argument %d: %q as a string", i, s)
		}
	}
	if got.String() != want.String() {
		t.Errorf("String() = %q, want %q", got.String(), want.String())
	}
}

// TestEvalCmdAllocations bounds evalCmd's allocations: the string slice,
// the argument slice and the command, whatever the number of arguments.
func TestEvalCmdAllocations(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e"}
	args := []string{"c:1", "30000", "5000", "wait", "redisson_lock__channel:{a}", "publish", "1666", "1000", "123456", "1", "0", "0"}
	n := testing.AllocsPerRun(100, func() { _ = evalCmd(context.Background(), "evalsha", "abc", keys, args) })
	if n > 3 {
		t.Errorf("%v allocations, want at most 3", n)
	}
}
