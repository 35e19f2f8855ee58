package wire

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/fairlock/fairlock/redistest"
)

// What one step of a script costs the server, measured inside the
// script: each sub-benchmark runs its step 2,000 times in one EVAL, between
// two reads of the server's clock (TIME, microseconds), and reports the
// mean in µs per step - a redis.call's whole cost (its arguments made into
// Redis strings, the command looked up and checked, the command itself,
// its reply written and read back into Lua values), or a piece of Lua the
// scripts run. The keys hold what a contended lock holds: a hash with one
// field, a queue of two, two zsets of two, a token counter. Run it with
//
//	go test -run '^$' -bench CallCost -benchtime 5x ./lock/internal/wire/
//
// It is the measurement behind DESIGN.md's account of where a contended
// acquisition's script time goes; the figures move with the machine's load
// (compare them within one run).
func BenchmarkCallCost(b *testing.B) {
	srv := redistest.Start(b)
	set := func(args ...string) {
		if err, ok := srv.Do(b, args...).(error); ok {
			b.Fatalf("%v: %v", args, err)
		}
	}
	set("HSET", "h", "c:1", "1")
	set("RPUSH", "q", "c:2", "c:3")
	set("ZADD", "t", "1700000000000", "c:2", "1700000001000", "c:3")
	set("ZADD", "a", "1700000000000", "c:2", "1700000001000", "c:3")
	set("SET", "tok", "1700000000000000")
	set("PEXPIRE", "t", "600000")
	for _, step := range []struct{ name, lua string }{
		{"nothing", "local x = i"},
		{"EXISTS", "redis.call('exists', KEYS[1], KEYS[2])"},
		{"HGET", "redis.call('hget', KEYS[1], 'c:1')"},
		{"GET", "redis.call('get', KEYS[5])"},
		{"PTTL", "redis.call('pttl', KEYS[1])"},
		{"ZCARD", "redis.call('zcard', KEYS[3])"},
		{"TIME", "redis.call('time')"},
		{"LINDEX", "redis.call('lindex', KEYS[2], 0)"},
		{"LRANGE_0_1", "redis.call('lrange', KEYS[2], 0, 1)"},
		{"ZSCORE", "redis.call('zscore', KEYS[3], 'c:2')"},
		{"ZMSCORE_2", "redis.call('zmscore', KEYS[4], 'c:2', 'c:3')"},
		{"ZREVRANGE_WITHSCORES", "redis.call('zrevrange', KEYS[3], 0, 0, 'WITHSCORES')"},
		{"ZCOUNT", "redis.call('zcount', KEYS[4], '(1700000000500', '+inf')"},
		{"ZADD", "redis.call('zadd', KEYS[4], 1700000000000 + i, 'c:2')"},
		{"HSET", "redis.call('hset', KEYS[1], 'c:1', 1)"},
		{"PEXPIRE", "redis.call('pexpire', KEYS[1], 30000)"},
		{"SET_PX", "redis.call('set', KEYS[5], '1700000000000001', 'px', 31000)"},
		// An unlock latch is a new key at every Unlock (its name holds
		// the request's ID): the key and its expiry made, where SET_PX
		// overwrites a key that exists. Its removal when it expires, 3 s
		// later, is the server's expiry cycle's, not counted here.
		{"SET_PX_new_key", "redis.call('set', 'latch:' .. run .. ':' .. i, '0', 'px', 3000)"},
		{"PUBLISH", "redis.call('publish', 'ch:x', 'grant:1700000000000001:1700000000000000')"},
		{"format_.0f", "local s = string.format('%.0f', 1700000000000000 + i)"},
		{"format_d", "local s = string.format('%d', 1700000000000000 + i)"},
		{"tonumber", "local n = tonumber('1700000000000000')"},
		{"gmatch", "for c in string.gmatch('publish', '[^,]+') do end"},
		{"acl_check_cmd", "redis.acl_check_cmd('publish', 'ch:x', '0')"},
		{"closure", "local function f(a) return a end"},
		// The 29 calls of one contended acquisition (DESIGN.md's table:
		// the enqueue behind 14 waiters, then the hand-over unlock), each
		// as the scripts make it, with none of the scripts' Lua between
		// them; the writes undo one another, so every step finds the
		// keys as the first did.
		{"contended_acquisition_calls", contendedCalls},
	} {
		script := fmt.Sprintf(`local n = 2000
local run = redis.call('incr', 'callcost:run')
local t0 = redis.call('time')
for i = 1, n do
%s
end
local t1 = redis.call('time')
return tostring(((t1[1] - t0[1]) * 1e6 + (t1[2] - t0[2])) / n)`, step.lua)
		b.Run(step.name, func(b *testing.B) {
			var sum float64
			for range b.N {
				reply := srv.Do(b, "EVAL", script, "5", "h", "q", "t", "a", "tok")
				s, ok := reply.(string)
				if !ok {
					b.Fatalf("%s: %v", step.name, reply)
				}
				us, err := strconv.ParseFloat(s, 64)
				if err != nil {
					b.Fatalf("%s: %q: %v", step.name, s, err)
				}
				sum += us
			}
			b.ReportMetric(sum/float64(b.N), "server-µs/step")
		})
	}
}

// contendedCalls is the redis.calls of one contended acquisition, in the
// order the scripts make them, on BenchmarkCallCost's keys.
const contendedCalls = `redis.call('exists', KEYS[1], KEYS[2])
redis.call('lindex', KEYS[2], 0)
redis.call('zmscore', KEYS[4], 'c:2', 'c:1')
redis.call('hget', KEYS[1], 'c:1')
redis.call('zscore', KEYS[3], 'c:1')
redis.call('time')
redis.call('pttl', KEYS[3])
redis.call('zadd', KEYS[4], 1700000002000, 'c:1')
redis.call('rpush', KEYS[2], 'c:1')
redis.call('zcard', KEYS[3])
redis.call('zcount', KEYS[4], '(1700000000500', '+inf')
redis.call('zrevrange', KEYS[3], 0, 0, 'WITHSCORES')
redis.call('zadd', KEYS[3], 1700000002000, 'c:1')
redis.call('zcount', KEYS[4], 0, 0)
redis.call('lrange', KEYS[2], 0, 1)
redis.call('hget', KEYS[1], 'c:1')
redis.call('get', KEYS[5])
redis.call('del', KEYS[1])
redis.call('set', 'latch', 0, 'px', 5000)
redis.call('zmscore', KEYS[4], 'c:2', 'c:3')
redis.call('time')
redis.call('rpop', KEYS[2])
redis.call('zrem', KEYS[3], 'c:1')
redis.call('zrem', KEYS[4], 'c:1')
redis.call('hset', KEYS[1], 'c:1', 1)
redis.call('pexpire', KEYS[1], 30000)
redis.call('set', KEYS[5], '1700000000000001', 'px', 31000)
redis.call('publish', 'ch:c:2', 'grant:1700000000000001:1700000000000000')
redis.call('zadd', KEYS[3], 'LT', 1700000000000, 'c:2')`
