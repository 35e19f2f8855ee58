package valkeybackend_test

import (
	"os"
	"strings"
	"testing"
)

// TestWatchKeySameAsRueidis fails when watch_test.go differs from
// rueidisbackend's by more than the names of the packages and clients:
// the adapters' WatchKey is one piece of code, generated, and so are its
// tests, by hand.
func TestWatchKeySameAsRueidis(t *testing.T) {
	r, err := os.ReadFile("../rueidisbackend/watch_test.go")
	if err != nil {
		t.Fatal(err)
	}
	v, err := os.ReadFile("watch_test.go")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer(
		"package rueidisbackend_test", "package valkeybackend_test",
		`"github.com/fairlock/fairlock/rueidisbackend"`, `"github.com/fairlock/fairlock/valkeybackend"`,
		`"github.com/redis/rueidis"`, `"github.com/valkey-io/valkey-go"`,
		"rueidisbackend.", "valkeybackend.",
		"rueidis.", "valkey.",
	).Replace(string(r))
	if string(v) != want {
		t.Fatal("valkeybackend/watch_test.go is not rueidisbackend/watch_test.go with valkey-go's names: change both")
	}
}
