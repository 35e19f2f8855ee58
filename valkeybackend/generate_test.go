package valkeybackend_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/fairlock/fairlock/valkeybackend/internal/fork"
)

// TestGeneratedFromRueidis fails when valkeybackend.go is not what
// rueidisbackend.go generates: a fix made in one adapter only, or an edit
// of the generated file. Run go generate ./valkeybackend after changing
// rueidisbackend.go.
func TestGeneratedFromRueidis(t *testing.T) {
	src, err := os.ReadFile("../rueidisbackend/rueidisbackend.go")
	if err != nil {
		t.Fatal(err)
	}
	want, err := fork.Valkey(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("valkeybackend.go")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	wl, gl := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if !bytes.Equal(w, g) {
			t.Fatalf("valkeybackend.go is not generated from rueidisbackend.go (run go generate ./valkeybackend); first difference at line %d:\n generated: %s\n on disk:   %s", i+1, w, g)
		}
	}
}
