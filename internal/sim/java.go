package sim

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/fairlock/fairlock/internal/redisson"
	"github.com/fairlock/fairlock/internal/soak"
)

// javaOwner is one Redisson thread on one lock (the Redisson model:
// Redisson's own scripts), as the soak's javaOwner: lock or tryLock with
// a fixed lease, hold, unlock; now and then a forceUnlock.
type javaOwner struct {
	l    *redisson.Lock
	name string
	rec  *recorder
	rnd  *rand.Rand
}

// javaLease is every Java hold's lease: Redisson's lock(leaseTime), no
// watchdog.
const javaLease = 5 * time.Second

func (j *javaOwner) step(ctx context.Context) {
	sleep(ctx, time.Duration(j.rnd.Int64N(int64(150*time.Millisecond))))
	op := &soak.Op{Lock: j.name, Owner: j.l.Field, Client: "java", Java: true}
	var held bool
	var err error
	r := j.rnd.IntN(10)
	op.Call = j.rec.h.Now()
	switch {
	case r < 4:
		op.Kind = soak.KindJavaLock
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err = j.l.LockWithLease(cctx, javaLease)
		cancel()
		held = err == nil
	case r < 9:
		op.Kind = soak.KindJavaTryLock
		held, err = j.l.TryLock(ctx, time.Duration(100+j.rnd.IntN(2000))*time.Millisecond, javaLease)
	default:
		op.Kind = soak.KindJavaForceUnlock
		op.Released, err = j.l.ForceUnlock(ctx)
	}
	op.Return = j.rec.h.Now()
	if err != nil {
		op.Err = err.Error()
	}
	if held {
		hd := &soak.Hold{Lock: j.name, Owner: j.l.Field, Client: "java", Java: true, Acquired: op.Return, Called: op.Call, Lease: javaLease}
		j.rec.h.AddHold(hd)
		op.Hold, op.New = hd, true
	}
	j.rec.h.Add(op)
	if held {
		j.release(ctx, op.Hold)
	}
}

// release holds for a while (sometimes long, writing nothing) and
// unlocks.
func (j *javaOwner) release(ctx context.Context, hd *soak.Hold) {
	hold := 300 * time.Millisecond
	if j.rnd.IntN(5) == 0 {
		hold = 3 * time.Second
	}
	sleep(ctx, time.Duration(j.rnd.Int64N(int64(hold))))
	u := &soak.Op{Kind: soak.KindJavaUnlock, Lock: j.name, Owner: j.l.Field, Client: "java", Java: true, Hold: hd}
	u.Call = j.rec.h.Now()
	hd.Releasing(u.Call)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	if err := j.l.Unlock(uctx); err != nil {
		u.Err = err.Error()
	}
	cancel()
	u.Return = j.rec.h.Now()
	j.rec.ended(hd, nil)
	j.rec.h.Add(u)
}
