package valkeybackend_test

import (
	"os"
	"strings"
	"testing"
)

// TestWatchKeySameAsRueidis fails when watch_test.go or sharded_test.go
// differs from rueidisbackend's by more than the names of the packages and
// clients: the adapters' WatchKey, SSubscribe and EvalWait are one piece
// of code, generated, and so are their tests, by hand.
func TestWatchKeySameAsRueidis(t *testing.T) {
	for _, name := range []string{"watch_test.go", "sharded_test.go"} {
		sameAsRueidis(t, name)
	}
}

func sameAsRueidis(t *testing.T, name string) {
	t.Helper()
	r, err := os.ReadFile("../rueidisbackend/" + name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := os.ReadFile(name)
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
		t.Fatalf("valkeybackend/%s is not rueidisbackend/%s with valkey-go's names: change both", name, name)
	}
}
