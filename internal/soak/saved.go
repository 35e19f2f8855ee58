package soak

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// A saved history is a run's history as JSON (gzip), so that the checkers
// can read it again without servers: TestRecheck (-soak.history) does,
// after a checker changed or while a violation is being explained.

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
	Op
	Hold int // index into Holds (-1: none)
}

type savedHistory struct {
	Seed   uint64
	Bounds Bounds
	Ops    []savedOp
	Holds  []savedHold
	Faults []Fault
	Stalls []Stall
}

// Save writes h, checked against b, to path.
func (h *History) Save(path string, b Bounds) error {
	holds := h.Holds()
	index := make(map[*Hold]int, len(holds))
	s := savedHistory{Seed: h.Seed, Bounds: b, Faults: h.Faults(), Stalls: h.Stalls()}
	for i, hd := range holds {
		index[hd] = i
		done, why := hd.Done()
		s.Holds = append(s.Holds, savedHold{Lock: hd.Lock, Owner: hd.Owner, Client: hd.Client, Java: hd.Java,
			Token: hd.Token, Acquired: hd.Acquired, Called: hd.Called, Lease: hd.Lease, Watches: hd.Watches,
			Done: done, DoneErr: why, Unlocking: hd.Unlocking()})
	}
	for _, op := range h.Ops() {
		so := savedOp{Op: *op, Hold: -1}
		so.Op.Hold = nil
		if op.Hold != nil {
			i, ok := index[op.Hold]
			if !ok {
				return fmt.Errorf("soak: save: operation #%d has a hold the history does not list", op.ID)
			}
			so.Hold = i
		}
		s.Ops = append(s.Ops, so)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(f)
	err = json.NewEncoder(zw).Encode(&s)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// LoadHistory reads a history Save wrote, and the bounds it was checked
// against.
func LoadHistory(path string) (*History, Bounds, error) {
	h, b, err := loadHistory(path)
	if err != nil {
		return nil, Bounds{}, fmt.Errorf("soak: load %s: %w", path, err)
	}
	return h, b, nil
}

func loadHistory(path string) (*History, Bounds, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, Bounds{}, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, Bounds{}, err
	}
	var s savedHistory
	if err := json.NewDecoder(zr).Decode(&s); err != nil {
		return nil, Bounds{}, err
	}
	h := NewHistory(s.Seed)
	holds := make([]*Hold, len(s.Holds))
	for i, sh := range s.Holds {
		hd := &Hold{Lock: sh.Lock, Owner: sh.Owner, Client: sh.Client, Java: sh.Java, Token: sh.Token,
			Acquired: sh.Acquired, Called: sh.Called, Lease: sh.Lease, Watches: sh.Watches,
			done: sh.Done, doneErr: sh.DoneErr, unlocking: sh.Unlocking}
		holds[i] = hd
		h.holds = append(h.holds, hd)
	}
	for _, so := range s.Ops {
		op := so.Op
		if so.Hold >= 0 {
			if so.Hold >= len(holds) {
				return nil, Bounds{}, fmt.Errorf("operation #%d names hold %d of %d", op.ID, so.Hold, len(holds))
			}
			op.Hold = holds[so.Hold]
		}
		h.ops = append(h.ops, &op)
	}
	h.faults, h.stalls = s.Faults, s.Stalls
	return h, s.Bounds, nil
}
