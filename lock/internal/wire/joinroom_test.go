package wire

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairlock/fairlock/redistest"
)

// TestJoinRoomWhenRedissonZsetHasEntriesTheListLacks: an eviction of the
// keys with an expiry can take the queue's list and leave Redisson's
// zset, which a Redisson script made without one. A fairlock owner that
// joins then must still count the Redisson waiter in the zset and chain
// on its deadline: counted from the list it joined with a Redisson
// deadline 5.9 s ahead instead of past the Redisson waiter's 300 s, and
// Redisson's own acquisitions would run it down until Redisson's purge
// dropped it alive. (Found by building this state by hand while reading
// the simulation's seed 198211716742332, which turned out to be the
// checker's: internal/soak's TestSavedHistoryOfSeed198211716742332.)
func TestJoinRoomWhenRedissonZsetHasEntriesTheListLacks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	r := newCostRig(t, srv)
	k := r.k
	now := time.Now().UnixMilli()
	srv.Do(t, "HSET", k.Hash, "java:1", "1")
	srv.Do(t, "PEXPIRE", k.Hash, "30000")
	javaDeadline := now + 300_000
	srv.Do(t, "ZADD", k.Timeouts, strconv.FormatInt(javaDeadline, 10), "java:2") // no expiry, no list
	if got := r.acquire(1, View{}); !strings.HasPrefix(fmt.Sprint(got), "[0 ") {
		t.Fatalf("acquire: %v, want queued", got)
	}
	s, _ := srv.Do(t, "ZSCORE", k.Timeouts, owner(1)).(string)
	deadline, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("the joiner's Redisson deadline %q: %v", s, err)
	}
	if int64(deadline) < javaDeadline {
		t.Errorf("the joiner's Redisson deadline is %.1f s ahead, before the queued Redisson waiter's (300 s ahead): Redisson's acquisitions can run it down and drop it alive",
			(deadline-float64(now))/1000)
	}
}
