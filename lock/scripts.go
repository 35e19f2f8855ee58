package lock

import (
	_ "embed"

	"github.com/fairlock/fairlock/backend"
)

// The algorithm lives in these scripts (scripts/*.lua) and in mutex.go,
// which calls them. Every script is the shared prelude (server time, stale
// head purge, head wake-up) followed by its own body.
var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/unlock.lua
	unlockLua string
	//go:embed scripts/leave.lua
	leaveLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/force_unlock.lua
	forceUnlockLua string
	//go:embed scripts/delete.lua
	deleteLua string
	//go:embed scripts/inspect.lua
	inspectLua string
)

// scriptSet is built per Client (no package-level mutable state).
type scriptSet struct {
	acquire, unlock, leave, renew, forceUnlock, delete, inspect *backend.Script
}

func newScriptSet() scriptSet {
	s := func(name, body string) *backend.Script { return backend.NewScript(name, preludeLua+"\n"+body) }
	return scriptSet{
		acquire:     s("acquire", acquireLua),
		unlock:      s("unlock", unlockLua),
		leave:       s("leave", leaveLua),
		renew:       backend.NewScript("renew", renewLua),
		forceUnlock: s("force_unlock", forceUnlockLua),
		delete:      s("delete", deleteLua),
		inspect:     s("inspect", inspectLua),
	}
}
