package sim

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fairlock/fairlock/internal/soak"
)

// recorder keeps what soak.History cannot take from outside its
// package: when each hold's Done closed and when its last Unlock was
// called (soak.Hold's setters are unexported). checked joins both into
// a soak.History through soak's saved-history format.
type recorder struct {
	h *soak.History

	mu   sync.Mutex
	ends map[*soak.Hold]holdEnd
}

type holdEnd struct {
	done      time.Duration
	why       string
	unlocking time.Duration
}

func newRecorder(seed uint64) *recorder {
	return &recorder{h: soak.NewHistory(seed), ends: map[*soak.Hold]holdEnd{}}
}

// ended records that hd's Done closed now with err.
func (r *recorder) ended(hd *soak.Hold, err error) {
	now := r.h.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.ends[hd]
	if e.done == 0 {
		e.done = now
		if err != nil {
			e.why = err.Error()
		}
		r.ends[hd] = e
	}
}

// releasing records that hd's owner called its last Unlock at d.
func (r *recorder) releasing(hd *soak.Hold, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.ends[hd]
	if e.unlocking == 0 {
		e.unlocking = d
		r.ends[hd] = e
	}
}

// The mirror of soak's saved history (saved.go), field for field.
type savedHold struct {
	Lock, Owner, Client string
	Java                bool
	Token               int64
	Acquired, Called    time.Duration
	Lease               time.Duration
	Watches             bool
	Done                time.Duration
	DoneErr             string
	Unlocking           time.Duration
}

type savedOp struct {
	soak.Op
	Hold int
}

type savedHistory struct {
	Seed   uint64
	Bounds soak.Bounds
	Ops    []savedOp
	Holds  []savedHold
	Faults []soak.Fault
	Stalls []soak.Stall
}

// complete returns the history with every hold's end filled in, by
// writing it in soak's saved format to dir and loading it back.
func (r *recorder) complete(dir string, b soak.Bounds) (*soak.History, error) {
	holds := r.h.Holds()
	index := make(map[*soak.Hold]int, len(holds))
	s := savedHistory{Seed: r.h.Seed, Bounds: b, Faults: r.h.Faults(), Stalls: r.h.Stalls()}
	r.mu.Lock()
	for i, hd := range holds {
		index[hd] = i
		e := r.ends[hd]
		s.Holds = append(s.Holds, savedHold{Lock: hd.Lock, Owner: hd.Owner, Client: hd.Client, Java: hd.Java,
			Token: hd.Token, Acquired: hd.Acquired, Called: hd.Called, Lease: hd.Lease, Watches: hd.Watches,
			Done: e.done, DoneErr: e.why, Unlocking: e.unlocking})
	}
	r.mu.Unlock()
	for _, op := range r.h.Ops() {
		so := savedOp{Op: *op, Hold: -1}
		so.Op.Hold = nil
		if op.Hold != nil {
			so.Hold = index[op.Hold]
		}
		s.Ops = append(s.Ops, so)
	}
	path := filepath.Join(dir, fmt.Sprintf("history-%d.json.gz", r.h.Seed))
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	zw := gzip.NewWriter(f)
	err = json.NewEncoder(zw).Encode(&s)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	h, _, err := soak.LoadHistory(path)
	return h, err
}
