package goredisbackend

import (
	"context"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// evalCmd builds EVAL or EVALSHA as go-redis' own Eval does: name,
// payload, the number of keys, the keys and the arguments.
//
// go-redis takes a command's arguments as []any, and putting a string in
// an interface value copies its header to a new allocation: one per
// argument, two thirds of what a Lock+Unlock pair cost this adapter. So
// the strings are copied into one slice and each interface value points
// into it (stringAt): two allocations per command, whatever its length,
// and arguments that are strings to everything that reads them (the
// writer, the cluster client's routing by the first key, hooks such as
// redisotel that print the command).
func evalCmd(ctx context.Context, name, payload string, keys, args []string) *redis.Cmd {
	strs := make([]string, 0, 2+len(keys)+len(args))
	strs = append(append(append(strs, name, payload), keys...), args...)
	cmdArgs := make([]any, 1+len(strs))
	cmdArgs[0], cmdArgs[1], cmdArgs[2] = stringAt(&strs[0]), stringAt(&strs[1]), len(keys)
	for i := 2; i < len(strs); i++ {
		cmdArgs[i+1] = stringAt(&strs[i])
	}
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // the cluster client routes by the first key
	}
	return cmd
}

// stringAt returns any(*p) without copying *p's header to a new
// allocation: the interface value's data word points at *p itself, as it
// points at a copy for any(*p). The value is an ordinary string to its
// readers (type switches, ==, fmt); *p must not change afterwards, as
// nothing may change the value an interface holds.
func stringAt(p *string) any {
	v := any("") // type word: string; "" is static data, no allocation
	(*[2]unsafe.Pointer)(unsafe.Pointer(&v))[1] = unsafe.Pointer(p)
	return v
}
