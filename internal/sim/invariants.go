package sim

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/alicebob/miniredis/v2"
)

// invariantScript checks each lock's keys in one atomic step on the
// server, independent of what any client believes: the hash names one
// owner at most; the queue has no owner twice; the queue and Redisson's
// timeout zset hold the same owners; every fairlock liveness entry whose
// deadline has not passed (and is not the mark 0 of an owner that left)
// is a queued owner - Redisson's purge drops an entry from the queue and
// its own zset only and leaves the mark behind (prelude.lua, B9). It returns one line per broken invariant and, last, each
// lock's token counter ("token <lock> <value>") for the monotonic check.
const invariantScript = `
local out = {}
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV, 5 do
  local hash, queue, timeouts, alive, token = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], ARGV[i+4]
  if redis.call('exists', hash) == 1 and redis.call('type', hash)['ok'] == 'hash' then
    local n = redis.call('hlen', hash)
    if n > 1 then
      table.insert(out, hash .. ': the hash names ' .. n .. ' owners: ' .. table.concat(redis.call('hkeys', hash), ','))
    end
  end
  local q = redis.call('lrange', queue, 0, -1)
  local inq = {}
  for _, o in ipairs(q) do
    if inq[o] then table.insert(out, queue .. ': ' .. o .. ' queued twice') end
    inq[o] = true
    if not redis.call('zscore', timeouts, o) then
      table.insert(out, queue .. ': ' .. o .. ' queued without a timeout entry')
    end
  end
  for _, o in ipairs(redis.call('zrange', timeouts, 0, -1)) do
    if not inq[o] then table.insert(out, timeouts .. ': ' .. o .. ' has a timeout entry but is not queued') end
  end
  local live = redis.call('zrange', alive, 0, -1, 'WITHSCORES')
  for j = 1, #live, 2 do
    local o, deadline = live[j], tonumber(live[j+1])
    if not inq[o] and deadline ~= 0 and deadline > now then
      table.insert(out, alive .. ': ' .. o .. ' has a live liveness entry (deadline ' .. live[j+1] .. ', now ' .. now .. ') but is not queued')
    end
  end
  table.insert(out, 'token ' .. hash .. ' ' .. (redis.call('get', token) or '0'))
end
return out
`

// lockKeys returns the five keys of a lock named name (no braces), as
// lock/internal/wire derives them (RULES.md's keyspace table).
func lockKeys(name string) []string {
	tag := "{" + name + "}"
	return []string{name, "redisson_lock_queue:" + tag, "redisson_lock_timeout:" + tag,
		"fairlock_lock_alive:" + tag, "redisson_lock_token:" + tag}
}

// Invariants checks the server's state on its own connection, which no
// fault touches.
type Invariants struct {
	conn net.Conn
	r    *bufio.Reader
	args []string

	mu        sync.Mutex
	checks    int
	broken    []string
	tokens    map[string]int64
	lastCheck []string
}

// NewInvariants opens a direct connection to srv for the locks named.
func NewInvariants(srv *miniredis.Miniredis, names []string) (*Invariants, error) {
	c, err := srv.Dial()
	if err != nil {
		return nil, err
	}
	inv := &Invariants{conn: c, r: bufio.NewReader(c), tokens: map[string]int64{}}
	for _, n := range names {
		inv.args = append(inv.args, lockKeys(n)...)
	}
	return inv, nil
}

// Check runs the script once and records what it found; a token counter
// that went down is a broken invariant too (forgetAll excepted).
func (inv *Invariants) Check() error {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	words := append([]string{"EVAL", invariantScript, "0"}, inv.args...)
	if _, err := inv.conn.Write(encodeCommand(words)); err != nil {
		return err
	}
	frame, err := readFrame(inv.r)
	if err != nil {
		return err
	}
	lines, err := bulkStrings(frame)
	if err != nil {
		return err
	}
	inv.checks++
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "token" {
			v, _ := strconv.ParseInt(f[2], 10, 64)
			if v != 0 && v < inv.tokens[f[1]] {
				inv.broken = append(inv.broken, fmt.Sprintf("%s: the token counter went down from %d to %d", f[1], inv.tokens[f[1]], v))
			}
			if v > inv.tokens[f[1]] {
				inv.tokens[f[1]] = v
			}
			continue
		}
		inv.broken = append(inv.broken, l)
	}
	return nil
}

// Result returns how many checks ran and what they found broken.
func (inv *Invariants) Result() (int, []string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.checks, append([]string(nil), inv.broken...)
}

// Close closes the checker's connection.
func (inv *Invariants) Close() error { return inv.conn.Close() }

// encodeCommand writes words as a RESP array of bulk strings.
func encodeCommand(words []string) []byte {
	var b []byte
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(words)), 10)
	b = append(b, "\r\n"...)
	for _, w := range words {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(w)), 10)
		b = append(b, "\r\n"...)
		b = append(b, w...)
		b = append(b, "\r\n"...)
	}
	return b
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
