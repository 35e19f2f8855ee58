package redistest_test

import (
	"strings"
	"testing"

	"github.com/fairlock/fairlock/redistest"
)

// version returns the server's version field from INFO server
// (valkey_version or redis_version) and whether it is there.
func version(t *testing.T, s *redistest.Server, field string) (string, bool) {
	t.Helper()
	info, _ := s.Do(t, "INFO", "server").(string)
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":"); ok && k == field {
			return v, true
		}
	}
	return "", false
}

// TestWithServer: each kind starts its own binary, and a replica and a
// sentinel of a Valkey primary are Valkey too.
func TestWithServer(t *testing.T) {
	redis := redistest.Start(t, redistest.WithServer(redistest.Redis))
	if v, ok := version(t, redis, "valkey_version"); ok {
		t.Errorf("WithServer(Redis) started Valkey %s", v)
	}
	if v, ok := version(t, redis, "redis_version"); !ok || redis.Kind() != redistest.Redis {
		t.Errorf("WithServer(Redis): redis_version %q, Kind %q", v, redis.Kind())
	} else {
		t.Logf("Redis %s", v)
	}

	primary := redistest.Start(t, redistest.WithServer(redistest.Valkey))
	replica := redistest.StartReplica(t, primary)
	sentinel := redistest.StartSentinel(t, primary, "kinds")
	for name, s := range map[string]*redistest.Server{"primary": primary, "replica": replica, "sentinel": sentinel} {
		v, ok := version(t, s, "valkey_version")
		if !ok || s.Kind() != redistest.Valkey {
			t.Errorf("Valkey %s: valkey_version %q, Kind %q", name, v, s.Kind())
			continue
		}
		t.Logf("Valkey %s %s", name, v)
	}
}

func TestDefaultKind(t *testing.T) {
	for env, want := range map[string]redistest.Kind{"": redistest.Redis, "redis": redistest.Redis, "valkey": redistest.Valkey} {
		t.Setenv("FAIRLOCK_SERVER", env)
		if got, err := redistest.DefaultKind(); got != want || err != nil {
			t.Errorf("FAIRLOCK_SERVER=%q: DefaultKind() = %q, %v; want %q", env, got, err, want)
		}
	}
	t.Setenv("FAIRLOCK_SERVER", "memcached")
	if got, err := redistest.DefaultKind(); err == nil {
		t.Errorf("FAIRLOCK_SERVER=memcached: DefaultKind() = %q, want an error", got)
	}
	if _, err := redistest.Binary(); err == nil {
		t.Error("FAIRLOCK_SERVER=memcached: Binary() returned no error")
	}
	t.Setenv("FAIRLOCK_SERVER", "valkey")
	t.Setenv("FAIRLOCK_VALKEY_SERVER", "/nonexistent/valkey-server")
	if path, err := redistest.Binary(); err == nil {
		t.Errorf("FAIRLOCK_VALKEY_SERVER names no file: Binary() = %q, want an error", path)
	}
}
