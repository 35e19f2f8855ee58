package fork

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func rueidisSource(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile("../../../rueidisbackend/rueidisbackend.go")
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// TestGuards: the generator refuses a source its renames no longer fit,
// rather than writing a valkeybackend.go that says rueidis or uses a name
// valkey-go spells differently.
func TestGuards(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(src []byte) []byte
		want string
	}{
		{
			name: "RueidisOnlyName",
			edit: func(src []byte) []byte {
				return bytes.Replace(src, []byte("rueidis.IsRedisNil(err)"), []byte("rueidis.IsRedisNil(err) || rueidis.IsRedisBusyGroup(err)"), 1)
			},
			want: "add a rename",
		},
		{
			name: "StaleRename",
			edit: func(src []byte) []byte {
				return bytes.Replace(src, []byte("maps a rueidis result"), []byte("maps a client's result"), 1)
			},
			want: "no longer occurs",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Valkey(tc.edit(rueidisSource(t)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Valkey = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
