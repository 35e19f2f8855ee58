package sim

import (
	"fmt"
	"strings"

	luajson "github.com/alicebob/miniredis/v2/gopher-json"
	"github.com/alicebob/miniredis/v2/server"
	lua "github.com/yuin/gopher-lua"
)

// strictGlobals makes reading or creating a global from a script an
// error, as Redis (and miniredis) do; debug goes after it.
const strictGlobals = `
local getinfo = debug.getinfo
local function fromScript()
  local w = getinfo(3, "S")
  return w ~= nil and w.what ~= "C"
end
setmetatable(_G, {
  __newindex = function(t, k, v)
    if fromScript() then error("Script attempted to create global variable '" .. tostring(k) .. "'", 2) end
    rawset(t, k, v)
  end,
  __index = function(t, k)
    if fromScript() then error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2) end
    return rawget(t, k)
  end,
})
debug = nil
`

// newState opens the libraries miniredis gives a script - base, package,
// coroutine, table, string, math, cjson, os.clock, redis (and its alias
// server) - and notes every table's fields for restore.
func (e *scriptEngine) newState() error {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.CoroutineLibName, lua.OpenCoroutine},
		{lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath},
		{lua.DebugLibName, lua.OpenDebug}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), Protect: true}, lua.LString(lib.name)); err != nil {
			return err
		}
	}
	luajson.Preload(l)
	if err := l.CallByParam(lua.P{Fn: l.GetGlobal("require"), NRet: 1, Protect: true}, lua.LString("json")); err != nil {
		return err
	}
	l.SetGlobal("cjson", l.Get(-1))
	l.Pop(1)
	redis := l.NewTable()
	l.SetFuncs(redis, e.redisLib())
	for i, level := range []string{"LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"} {
		redis.RawSetString(level, lua.LNumber(i))
	}
	l.SetGlobal("redis", redis)
	l.SetGlobal("server", redis)
	l.RegisterModule("os", map[string]lua.LGFunction{"clock": func(l *lua.LState) int { l.Push(lua.LNumber(42)); return 1 }})
	l.SetGlobal("KEYS", l.NewTable())
	l.SetGlobal("ARGV", l.NewTable())
	if err := l.DoString(strictGlobals); err != nil {
		return err
	}
	e.l = l
	e.pristine = tablesOf(l.G.Global, 2)
	return nil
}

// tablesOf returns t and the tables reachable from it in depth steps,
// each once, with their fields now.
func tablesOf(t *lua.LTable, depth int) []luaTable {
	seen := map[*lua.LTable]bool{}
	var out []luaTable
	var visit func(t *lua.LTable, depth int)
	visit = func(t *lua.LTable, depth int) {
		if seen[t] {
			return
		}
		seen[t] = true
		lt := luaTable{t: t}
		t.ForEach(func(k, v lua.LValue) { lt.fields = append(lt.fields, luaField{k, v}) })
		out = append(out, lt)
		for _, f := range lt.fields {
			if sub, ok := f.v.(*lua.LTable); ok && depth > 0 {
				visit(sub, depth-1)
			}
		}
	}
	visit(t, depth)
	return out
}

// restore puts back every field a script changed and drops every field
// it added, in the globals and the libraries' tables (not metatables).
func (e *scriptEngine) restore() {
	for _, lt := range e.pristine {
		for _, f := range lt.fields {
			if lt.t.RawGet(f.k) != f.v {
				lt.t.RawSet(f.k, f.v)
			}
		}
		n := 0
		lt.t.ForEach(func(lua.LValue, lua.LValue) { n++ })
		if n == len(lt.fields) {
			continue
		}
		keep := make(map[lua.LValue]bool, len(lt.fields))
		for _, f := range lt.fields {
			keep[f.k] = true
		}
		var extra []lua.LValue
		lt.t.ForEach(func(k, _ lua.LValue) {
			if !keep[k] {
				extra = append(extra, k)
			}
		})
		for _, k := range extra {
			lt.t.RawSet(k, lua.LNil)
		}
	}
}

// redisLib is the redis table's functions, as miniredis has them.
func (e *scriptEngine) redisLib() map[string]lua.LGFunction {
	return map[string]lua.LGFunction{
		"call":  func(l *lua.LState) int { return e.call(l, true) },
		"pcall": func(l *lua.LState) int { return e.call(l, false) },
		"error_reply": func(l *lua.LState) int {
			msg, ok := l.Get(1).(lua.LString)
			if !ok {
				l.Error(lua.LString("wrong number or type of arguments"), 1)
				return 0
			}
			code, rest, found := strings.Cut(string(msg), " ")
			code = strings.TrimPrefix(code, "-")
			if !found {
				code, rest = "ERR", code
			}
			l.Push(fieldTable("err", code+" "+rest))
			return 1
		},
		"status_reply": func(l *lua.LState) int {
			msg, ok := l.Get(1).(lua.LString)
			if !ok {
				l.Error(lua.LString("wrong number or type of arguments"), 1)
				return 0
			}
			l.Push(fieldTable("ok", string(msg)))
			return 1
		},
		"sha1hex": func(l *lua.LState) int {
			if l.GetTop() != 1 {
				l.Error(lua.LString("wrong number of arguments"), 1)
				return 0
			}
			l.Push(lua.LString(sha1Hex(lua.LVAsString(l.Get(1)))))
			return 1
		},
		"log":                func(l *lua.LState) int { l.CheckInt(1); l.CheckString(2); return 0 },
		"replicate_commands": func(l *lua.LState) int { l.Push(lua.LTrue); return 1 },
		"set_repl": func(l *lua.LState) int {
			if l.GetTop() != 1 {
				l.Error(lua.LString("wrong number of arguments"), 1)
			}
			return 1
		},
		"setresp": func(l *lua.LState) int {
			// miniredis drops the switch when the script ends: the calls
			// keep RESP2, and so do the replies.
			if v := l.CheckInt(1); v != 2 && v != 3 {
				l.Error(lua.LString("RESP version must be 2 or 3"), 1)
			}
			return 0
		},
	}
}

func fieldTable(k, v string) *lua.LTable {
	t := &lua.LTable{}
	t.RawSetString(k, lua.LString(v))
	return t
}

// call is redis.call (failFast) and redis.pcall: the command runs on the
// server, in the script's context, and its reply becomes Lua values.
func (e *scriptEngine) call(l *lua.LState, failFast bool) int {
	top := l.GetTop()
	if top == 0 {
		l.Error(scriptErr("Please specify at least one argument for this redis lib call script: %s, &c.", e.digest), 1)
		return 0
	}
	args := make([]string, 0, top)
	for i := 1; i <= top; i++ {
		switch a := l.Get(i).(type) {
		case lua.LNumber:
			args = append(args, a.String())
		case lua.LString:
			args = append(args, string(a))
		default:
			l.Error(scriptErr("Lua redis lib command arguments must be strings or integers script: %s, &c.", e.digest), 1)
			return 0
		}
	}
	e.wrote = e.wrote || e.writes(args[0])
	res, err := e.do(args...)
	if err != nil {
		return callFailed(l, e.digest, err, failFast)
	}
	l.Push(toLua(l, res))
	return 1
}

// callFailed raises a command's error (redis.call) or returns it as
// {err=...} (redis.pcall).
func callFailed(l *lua.LState, digest string, err error, failFast bool) int {
	unknown := strings.Contains(err.Error(), "ERR unknown command")
	if failFast {
		if unknown {
			l.Error(scriptErr("Unknown Redis command called from script script: %s, &c.", digest), 1)
		} else {
			l.Error(lua.LString(err.Error()), 1)
		}
		return 0
	}
	msg := err.Error()
	if unknown {
		msg = "ERR Unknown Redis command called from script"
	}
	l.Push(fieldTable("err", msg))
	return 1
}

// toLua converts a reply as Redis gives it to a script: nil is false, a
// status is {ok=...}, an array is a table.
func toLua(l *lua.LState, res any) lua.LValue {
	switch r := res.(type) {
	case nil:
		return lua.LFalse
	case int:
		return lua.LNumber(r)
	case int64:
		return lua.LNumber(r)
	case string:
		return lua.LString(r)
	case []byte:
		return lua.LString(r)
	case server.Simple:
		return fieldTable("ok", string(r))
	case []any:
		t := l.CreateTable(len(r), 0)
		for i, x := range r {
			t.RawSetInt(i+1, toLua(l, x))
		}
		return t
	}
	return lua.LString(fmt.Sprint(res))
}
