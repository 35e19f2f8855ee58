package lock

import (
	"sync"
	"time"
)

// serverFloor is a lower bound of the server's clock: the server's time
// in a reply (read while the script ran, so before the reply came) plus
// the local monotonic time since the reply came. Leaves carry it (the
// server's time from which they do nothing, Mutex.leaveQueue), so it must
// never run ahead of the server's clock: it is used only while its
// reference is younger than floorMaxAge, over which the two clocks'
// drift (at most about 100 ppm) stays under floorMargin.
type serverFloor struct {
	mu     sync.Mutex
	server time.Time // the server's clock at a moment before local
	local  time.Time // local time, with its monotonic reading
}

const (
	floorMaxAge = time.Minute
	floorMargin = 50 * time.Millisecond
)

// observe takes the server's time serverUs (µs) read by a script whose
// reply came at recv, when it bounds the server's clock higher than the
// reference does - a reply that was long on its way bounds it low, and
// kept, it would date a leave's limit seconds before the server's time,
// and the leave would do nothing (the simulation: replies delayed past
// the leave's bound, then one leave after another "reached the server
// after its client had given up on it") - or when the reference is past
// half its usable age.
func (f *serverFloor) observe(serverUs int64, recv time.Time) {
	if serverUs <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	server := time.UnixMicro(serverUs)
	if f.local.IsZero() || recv.Sub(f.local) > floorMaxAge/2 || server.After(f.server.Add(recv.Sub(f.local))) {
		f.server, f.local = server, recv
	}
}

// at returns the server's time at local time t or later, less
// floorMargin, in ms; 0 when the reference is missing or too old. (A
// reference taken after t bounds it too: the server's clock at t was at
// least the reference less the local time from t to its reply.)
func (f *serverFloor) at(t time.Time) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	age := t.Sub(f.local)
	if f.local.IsZero() || age > floorMaxAge {
		return 0
	}
	return f.server.Add(age - floorMargin).UnixMilli()
}
