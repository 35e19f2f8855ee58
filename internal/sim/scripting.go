package sim

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// scriptEngine runs a miniredis server's EVAL and EVALSHA on one Lua
// state kept from script to script, each script compiled once. miniredis
// opens a new state, with all its libraries, for every script: three
// quarters of the simulation's CPU went there. Redis keeps one state too;
// what a script could leave behind in it (a global or a library's field
// changed) is put back after each run, so no script sees another's.
//
// The engine sits in the server's pre-hook and takes only plain calls:
// a connection outside MULTI and pub/sub, on database 0, with a valid key
// count and a script that compiles. Everything else (errors included)
// falls through to miniredis's own commands, which reply as they always
// did. Like miniredis's, a script runs under the server's lock: atomic.
// One difference in text: a command refused inside a script (EVAL, say)
// names, in its error, the script whose context the engine borrowed.
type scriptEngine struct {
	m      *miniredis.Miniredis
	srv    *server.Server
	nested any // the connection context miniredis gives a script's calls

	// Guarded by m's lock.
	l        *lua.LState
	compiled map[string]*lua.FunctionProto // by digest
	pristine []luaTable                    // the state's tables as set up
	digest   string                        // the running script's
	runs     int                           // scripts run here
	wrote    bool                          // the running script called a write command
	readOnly map[string]bool               // by command name as called
	out      bytes.Buffer                  // a call's reply
	w        *bufio.Writer
	r        *bufio.Reader
	// afterWrite, if set, runs after each script that called a write
	// command, with the script's keys, before its reply goes out, under
	// the same lock.
	afterWrite func(do CommandFunc, keys []string)
}

// CommandFunc runs one command in a script's context (under the server's
// lock) and returns its reply as server.ParseReply gives it.
type CommandFunc func(args ...string) (any, error)

// luaTable is one table of the state and its fields as set up.
type luaTable struct {
	t      *lua.LTable
	fields []luaField
}

type luaField struct{ k, v lua.LValue }

// installScripting puts a script engine in front of m's scripting
// commands. m must not use AUTH or a pre-hook of its own (SetError).
func installScripting(m *miniredis.Miniredis) (*scriptEngine, error) {
	if m.Server() == nil { // a server without a listener starts on its first Dial
		c, err := m.Dial()
		if err != nil {
			return nil, err
		}
		c.Close()
	}
	e := &scriptEngine{m: m, srv: m.Server(), compiled: map[string]*lua.FunctionProto{}, readOnly: map[string]bool{}}
	if err := e.captureNested(); err != nil {
		return nil, err
	}
	e.w = bufio.NewWriter(&e.out)
	e.r = bufio.NewReader(&e.out)
	if err := e.newState(); err != nil {
		return nil, err
	}
	e.srv.SetPreHook(e.hook)
	return e, nil
}

// captureNested runs one script through miniredis's own EVAL to take the
// connection context it gives a script's calls: a call dispatched with
// it runs under the lock the script holds, as miniredis's bridge does.
func (e *scriptEngine) captureNested() error {
	if err := e.srv.Register("SIM.NESTEDCTX", func(c *server.Peer, _ string, _ []string) {
		e.nested = c.Ctx
		c.WriteOK()
	}); err != nil {
		return err
	}
	e.srv.Dispatch(server.NewPeer(bufio.NewWriter(io.Discard)), []string{"EVAL", "return redis.call('SIM.NESTEDCTX')", "0"})
	if e.nested == nil {
		return errors.New("sim: miniredis's script context could not be captured")
	}
	return nil
}

// Runs returns how many scripts the engine ran (the rest fell through to
// miniredis's EVAL).
func (e *scriptEngine) Runs() int {
	e.m.Lock()
	defer e.m.Unlock()
	return e.runs
}

// Inspect runs f with the server's lock held: what f does sees one state.
func (e *scriptEngine) Inspect(f func(do CommandFunc)) {
	e.m.Lock()
	defer e.m.Unlock()
	f(e.do)
}

// do runs one command in a script's context (m's lock held).
func (e *scriptEngine) do(args ...string) (any, error) {
	e.out.Reset()
	p := server.NewPeer(e.w)
	p.Ctx = e.nested
	e.srv.Dispatch(p, args)
	e.w.Flush()
	e.r.Reset(&e.out)
	return server.ParseReply(e.r)
}

// writes: the command named (as called) may change data.
func (e *scriptEngine) writes(name string) bool {
	ro, ok := e.readOnly[name]
	if !ok {
		ro = e.srv.IsReadOnlyCommand(name)
		e.readOnly[name] = ro
	}
	return !ro
}

// hook takes the plain EVAL and EVALSHA calls; true when it replied.
func (e *scriptEngine) hook(c *server.Peer, cmd string, args ...string) bool {
	switch cmd {
	case "EVAL", "EVALSHA":
	case "SCRIPT":
		// From a script (m's lock held) miniredis refuses it; queued in
		// MULTI, it empties this cache early, which only slows EVALSHA.
		if len(args) > 0 && strings.EqualFold(args[0], "flush") && !fromScript(c) {
			e.m.Lock()
			clear(e.compiled)
			e.m.Unlock()
		}
		return false // miniredis keeps its own cache and replies
	default:
		return false
	}
	if len(args) < 2 || !plainConn(c) {
		return false
	}
	keys, argv, ok := splitKeys(args[1:])
	if !ok {
		return false
	}
	digest := args[0]
	if cmd == "EVAL" {
		digest = sha1Hex(args[0])
		if !e.load(args[0], digest) {
			return false
		}
	}
	e.m.Lock()
	defer e.m.Unlock()
	proto := e.compiled[digest]
	if proto == nil {
		return false // NOSCRIPT, from miniredis
	}
	e.run(c, digest, proto, keys, argv)
	return true
}

// plainConn: the connection is on database 0, outside MULTI and pub/sub,
// and not itself a script's (miniredis's context, read by reflection; a
// context this cannot read is not plain, and falls through).
func plainConn(c *server.Peer) bool {
	if c.Ctx == nil {
		return true
	}
	s, ok := peerState(c)
	if !ok {
		return false
	}
	nested, tx, sub, db := s.FieldByName("nested"), s.FieldByName("transaction"), s.FieldByName("subscriber"), s.FieldByName("selectedDB")
	if !nested.IsValid() || !tx.IsValid() || !sub.IsValid() || !db.IsValid() {
		return false
	}
	return !nested.Bool() && tx.IsNil() && sub.IsNil() && db.Int() == 0
}

// fromScript: c is a script's connection (or one this cannot read).
func fromScript(c *server.Peer) bool {
	if c.Ctx == nil {
		return false
	}
	s, ok := peerState(c)
	if !ok {
		return true
	}
	nested := s.FieldByName("nested")
	return !nested.IsValid() || nested.Bool()
}

// peerState returns the struct behind c's miniredis context (not nil),
// and false when it is not a pointer to a struct.
func peerState(c *server.Peer) (reflect.Value, bool) {
	v := reflect.ValueOf(c.Ctx)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	return v.Elem(), true
}

// splitKeys splits EVAL's "numkeys key... arg..."; false when numkeys is
// not a count of the words that follow.
func splitKeys(words []string) (keys, argv []string, ok bool) {
	n, err := strconv.Atoi(words[0])
	if err != nil || n < 0 || n > len(words)-1 {
		return nil, nil, false
	}
	return words[1 : 1+n], words[1+n:], true
}

// load compiles src once; false when it does not compile. miniredis's
// own cache learns the script too (SCRIPT LOAD), so an EVALSHA that
// falls through (in MULTI) finds it.
func (e *scriptEngine) load(src, digest string) bool {
	e.m.Lock()
	_, ok := e.compiled[digest]
	e.m.Unlock()
	if ok {
		return true
	}
	chunk, err := parse.Parse(strings.NewReader(src), "<string>")
	if err != nil {
		return false
	}
	proto, err := lua.Compile(chunk, "")
	if err != nil {
		return false
	}
	e.srv.Dispatch(server.NewPeer(bufio.NewWriter(io.Discard)), []string{"SCRIPT", "LOAD", src})
	e.m.Lock()
	e.compiled[digest] = proto
	e.m.Unlock()
	return true
}

// run runs one script for c and writes its reply (m's lock held).
func (e *scriptEngine) run(c *server.Peer, digest string, proto *lua.FunctionProto, keys, argv []string) {
	l := e.l
	e.digest, e.wrote = digest, false
	e.runs++
	l.SetTop(0)
	l.G.Global.RawSetString("KEYS", stringTable(l, keys))
	l.G.Global.RawSetString("ARGV", stringTable(l, argv))
	l.Push(l.NewFunctionFromProto(proto))
	if err := l.PCall(0, lua.MultRet, nil); err != nil {
		c.WriteError("ERR Error compiling script (new function): " + err.Error())
	} else {
		writeLua(l, c, l.Get(1))
	}
	l.SetTop(0)
	e.restore()
	if e.wrote && e.afterWrite != nil {
		e.afterWrite(e.do, keys)
	}
}

func stringTable(l *lua.LState, words []string) *lua.LTable {
	t := l.CreateTable(len(words), 0)
	for i, w := range words {
		t.RawSetInt(i+1, lua.LString(w))
	}
	return t
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// writeLua writes a script's result as Redis converts it.
func writeLua(l *lua.LState, c *server.Peer, v lua.LValue) {
	switch t := v.(type) {
	case lua.LBool:
		if t {
			c.WriteInt(1)
		} else {
			c.WriteNull()
		}
	case lua.LNumber:
		c.WriteInt(int(t))
	case lua.LString:
		c.WriteBulk(string(t))
	case *lua.LTable:
		writeTable(l, c, t)
	default: // nil, and what Redis has no reply for
		c.WriteNull()
	}
}

// writeTable writes {err=...} as an error, {ok=...} as a status, and
// else the table's array part, up to its first nil.
func writeTable(l *lua.LState, c *server.Peer, t *lua.LTable) {
	if s := t.RawGetString("err"); s.Type() != lua.LTNil {
		c.WriteError(s.String())
		return
	}
	if s := t.RawGetString("ok"); s.Type() != lua.LTNil {
		c.WriteInline(s.String())
		return
	}
	var items []lua.LValue
	for j := 1; ; j++ {
		v := l.GetTable(t, lua.LNumber(j))
		if v.Type() == lua.LTNil {
			break
		}
		items = append(items, v)
	}
	c.WriteLen(len(items))
	for _, v := range items {
		writeLua(l, c, v)
	}
}

// errNoArgs and the other texts below are miniredis's (and Redis's).
func scriptErr(format, digest string) lua.LString {
	return lua.LString(fmt.Sprintf(format, digest))
}
