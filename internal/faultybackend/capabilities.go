package faultybackend

import (
	"context"
	"time"

	"github.com/fairlock/fairlock/backend"
)

// withCapabilities returns f as a backend.Backend with exactly the
// optional capabilities of the backend it wraps: package lock finds them
// by type assertion, so each combination is its own type. Each one but
// EvalWait (a script request, faulted as Eval is) goes straight to the
// wrapped backend.
func (f *Faulty) withCapabilities() backend.Backend {
	kw, _ := f.inner.(backend.KeyWatcher)
	ss, _ := f.inner.(backend.ShardedSubscriber)
	cr, _ := f.inner.(backend.CachedReader)
	rw := replicaWaiter{f}
	mask := 0
	for i, has := range []bool{kw != nil, ss != nil, f.hasReplicaWaiter(), cr != nil} {
		if has {
			mask |= 1 << i
		}
	}
	switch mask {
	case 0:
		return struct {
			*Faulty
		}{f}
	case 1:
		return struct {
			*Faulty
			backend.KeyWatcher
		}{f, kw}
	case 2:
		return struct {
			*Faulty
			backend.ShardedSubscriber
		}{f, ss}
	case 3:
		return struct {
			*Faulty
			backend.KeyWatcher
			backend.ShardedSubscriber
		}{f, kw, ss}
	case 4:
		return struct {
			*Faulty
			replicaWaiter
		}{f, rw}
	case 5:
		return struct {
			*Faulty
			backend.KeyWatcher
			replicaWaiter
		}{f, kw, rw}
	case 6:
		return struct {
			*Faulty
			backend.ShardedSubscriber
			replicaWaiter
		}{f, ss, rw}
	case 7:
		return struct {
			*Faulty
			backend.KeyWatcher
			backend.ShardedSubscriber
			replicaWaiter
		}{f, kw, ss, rw}
	case 8:
		return struct {
			*Faulty
			backend.CachedReader
		}{f, cr}
	case 9:
		return struct {
			*Faulty
			backend.KeyWatcher
			backend.CachedReader
		}{f, kw, cr}
	case 10:
		return struct {
			*Faulty
			backend.ShardedSubscriber
			backend.CachedReader
		}{f, ss, cr}
	case 11:
		return struct {
			*Faulty
			backend.KeyWatcher
			backend.ShardedSubscriber
			backend.CachedReader
		}{f, kw, ss, cr}
	case 12:
		return struct {
			*Faulty
			replicaWaiter
			backend.CachedReader
		}{f, rw, cr}
	case 13:
		return struct {
			*Faulty
			backend.KeyWatcher
			replicaWaiter
			backend.CachedReader
		}{f, kw, rw, cr}
	case 14:
		return struct {
			*Faulty
			backend.ShardedSubscriber
			replicaWaiter
			backend.CachedReader
		}{f, ss, rw, cr}
	default: // all four
		return struct {
			*Faulty
			backend.KeyWatcher
			backend.ShardedSubscriber
			replicaWaiter
			backend.CachedReader
		}{f, kw, ss, rw, cr}
	}
}

func (f *Faulty) hasReplicaWaiter() bool {
	_, ok := f.inner.(backend.ReplicaWaiter)
	return ok
}

// replicaWaiter is the wrapper's backend.ReplicaWaiter.
type replicaWaiter struct{ f *Faulty }

// EvalWait runs the script and its WAIT on the wrapped backend, under the
// armed fault.
func (r replicaWaiter) EvalWait(ctx context.Context, s *backend.Script, keys, args []string, replicas int, timeout time.Duration) (backend.Reply, int, error) {
	return r.f.evalWait(ctx, s, keys, args, replicas, timeout)
}
