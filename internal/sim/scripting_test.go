package sim

import (
	"bufio"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// TestScriptEngine sends the same commands to a miniredis with the
// script engine and to one without, and wants the same replies, byte for
// byte: results of every type, errors raised and returned, globals
// refused, the state left clean for the next script (a library field a
// script changed or added is gone), EVALSHA and SCRIPT FLUSH, and EVAL in
// MULTI (which falls through to miniredis). Two kinds of error text may
// differ, and must agree on their message only: the globals' guard names
// places in its own Lua, not miniredis's, and a command refused in a
// script names the script that lent the engine its context.
func TestScriptEngine(t *testing.T) {
	const bump = "redis.call('incr', KEYS[1]); return redis.call('get', KEYS[1])"
	cmds := [][]string{
		{"EVAL", "return {1, 'two', {3}, false, true, nil, 5}", "0"},
		{"EVAL", "return 3.7", "0"},
		{"EVAL", "return {KEYS[1], KEYS[2], ARGV[1], #ARGV}", "2", "k1", "k2", "a1", "a2"},
		{"EVAL", "return redis.call('set', KEYS[1], ARGV[1])", "1", "s", "v"},
		{"EVAL", "return redis.call('type', KEYS[1])['ok']", "1", "s"},
		{"EVAL", "return redis.call('hget', KEYS[1], 'f')", "1", "s"},
		{"EVAL", "return redis.pcall('hget', KEYS[1], 'f')", "1", "s"},
		{"EVAL", "return redis.call('nosuchcommand')", "0"},
		{"EVAL", "return redis.pcall('nosuchcommand')", "0"},
		{"EVAL", "return redis.error_reply('MINE went wrong')", "0"},
		{"EVAL", "return redis.status_reply('FINE')", "0"},
		{"EVAL", "return redis.call('get', KEYS[1]) == false", "1", "missing"},
		{"EVAL", "return redis.call('lrange', KEYS[1], 0, -1)", "1", "missing"},
		{"EVAL", "x = 1", "0"},
		{"EVAL", "return y", "0"},
		{"EVAL", "string.mine = 'left behind'; KEYS = nil; return 1", "0"},
		{"EVAL", "return {tostring(string.mine), type(KEYS)}", "0"},
		{"EVAL", "return cjson.encode({a = 1})", "0"},
		{"EVAL", "return redis.sha1hex('x')", "0"},
		{"EVAL", bump, "1", "n"},
		{"EVALSHA", sha1Hex(bump), "1", "n"},
		{"EVALSHA", sha1Hex("return 'never loaded'"), "0"},
		{"SCRIPT", "LOAD", "return ARGV[1]"},
		{"EVALSHA", sha1Hex("return ARGV[1]"), "0", "loaded"},
		{"EVAL", "return 1", "2", "only-one"},
		{"EVAL", "return 1", "-1"},
		{"EVAL", "return (", "0"},
		{"EVAL", "return redis.pcall('script', 'flush')", "0"},
		{"MULTI"}, {"EVAL", bump, "1", "n"}, {"EXEC"},
		{"SCRIPT", "FLUSH"},
		{"EVALSHA", sha1Hex(bump), "1", "n"},
	}
	plain, fast := miniredis.RunT(t), miniredis.RunT(t)
	e, err := installScripting(fast)
	if err != nil {
		t.Fatal(err)
	}
	want, got := exchange(t, plain.Addr(), cmds), exchange(t, fast.Addr(), cmds)
	guard := regexp.MustCompile(`Script attempted to [a-z ]+ variable '[a-z]+'|This Redis command is not allowed from script`)
	for i := range cmds {
		if m := guard.FindString(want[i]); m != "" && got[i][0] == '-' && strings.Contains(got[i], m) {
			continue
		}
		if want[i] != got[i] {
			t.Errorf("%q:\nminiredis: %q\nengine:    %q", cmds[i], want[i], got[i])
		}
	}
	if e.Runs() < 15 {
		t.Errorf("the engine ran %d scripts, want the plain calls (15 or more)", e.Runs())
	}
}

// exchange sends each command on one connection and returns the replies.
func exchange(t *testing.T, addr string, cmds [][]string) []string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	out := make([]string, len(cmds))
	for i, words := range cmds {
		if _, err := c.Write(encodeCommand(words)); err != nil {
			t.Fatal(err)
		}
		frame, err := readFrame(r)
		if err != nil {
			t.Fatalf("%q: %v", words, err)
		}
		out[i] = string(frame)
	}
	return out
}
