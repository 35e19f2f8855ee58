package soak

import (
	"bytes"
	"fmt"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// The linearizability check (porcupine, as etcd's robustness tests do):
// each lock's history of grants, releases and losses must be explained by
// one lock with one holder at a time whose tokens grow. A grant takes
// effect somewhere between its call and its return; a release by the
// holder's last Unlock likewise; a hold that ended any other way - lost,
// force-unlocked, deleted, expired, a Java hold (Redisson's unlock says
// success even for a lock it no longer held) - ended somewhere between
// its grant and the moment its holder knew plus the notice bound, so
// porcupine may place the end anywhere in that window. Failed acquires
// are left out: whatever they may have been granted was given back, and
// a token they drew only makes later tokens larger.

type linKind uint8

const (
	linAcquire linKind = iota
	linRelease
	linEnd
)

type linInput struct {
	kind  linKind
	owner string
	java  bool
	token int64
}

type linState struct {
	holder string // "" when free
	token  int64
}

func linModel() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return linState{} },
		Step: func(st, in, _ any) (bool, any) {
			s, i := st.(linState), in.(linInput)
			switch i.kind {
			case linAcquire:
				if s.holder != "" || !i.java && i.token <= s.token {
					return false, s
				}
				if i.java {
					return true, linState{holder: i.owner, token: s.token}
				}
				return true, linState{holder: i.owner, token: i.token}
			case linRelease:
				if s.holder != i.owner {
					return false, s
				}
				return true, linState{token: s.token}
			}
			if s.holder == i.owner {
				return true, linState{token: s.token}
			}
			return true, s
		},
		Equal: func(a, b any) bool { return a == b },
		DescribeOperation: func(in, _ any) string {
			i := in.(linInput)
			return fmt.Sprintf("%s %s %d", [...]string{"acquire", "release", "end"}[i.kind], short(i.owner), i.token)
		},
		DescribeState: func(st any) string {
			s := st.(linState)
			if s.holder == "" {
				return fmt.Sprintf("free (token %d)", s.token)
			}
			return fmt.Sprintf("held by %s (token %d)", short(s.holder), s.token)
		},
	}
}

// linOps turns the history of one lock into porcupine operations.
func linOps(lock string, ops []*Op, holds []*Hold, b Bounds) []porcupine.Operation {
	var out []porcupine.Operation
	add := func(in linInput, call, ret time.Duration) {
		out = append(out, porcupine.Operation{ClientId: len(out), Input: in, Call: int64(call), Return: int64(ret)})
	}
	released := map[*Hold]bool{}
	for _, op := range ops {
		switch {
		case op.Lock != lock:
		case op.Kind.acquire() && op.Hold != nil && op.New:
			add(linInput{kind: linAcquire, owner: op.Owner, java: op.Java, token: op.Hold.Token}, op.Call, op.Return)
		case op.Kind == KindUnlock && op.Final:
			add(linInput{kind: linRelease, owner: op.Owner}, op.Call, op.Return)
			released[op.Hold] = true
		}
	}
	for _, h := range holds {
		if h.Lock != lock || released[h] {
			continue
		}
		done, _ := h.Done()
		end := done + b.Notice
		if !h.Watches && !h.Java {
			end = done + b.Tick
		}
		if done == 0 {
			end = 1 << 62 // open at the end of the history
		}
		add(linInput{kind: linEnd, owner: h.Owner, java: h.Java, token: h.Token}, h.Acquired, end)
	}
	return out
}

// checkLinearizable runs porcupine on each lock's history; a history it
// finds illegal is a violation, with porcupine's visualisation.
func checkLinearizable(ops []*Op, holds []*Hold, b Bounds) ([]Violation, map[string][]byte) {
	locks := map[string]bool{}
	for _, h := range holds {
		locks[h.Lock] = true
	}
	names := make([]string, 0, len(locks))
	for l := range locks {
		names = append(names, l)
	}
	sort.Strings(names)
	var out []Violation
	visual := map[string][]byte{}
	model := linModel()
	for _, l := range names {
		lops := linOps(l, ops, holds, b)
		res, info := porcupine.CheckOperationsVerbose(model, lops, time.Minute)
		switch res {
		case porcupine.Illegal:
			var buf bytes.Buffer
			if err := porcupine.Visualize(model, info, &buf); err == nil {
				visual[l] = buf.Bytes()
			}
			at := firstIllegal(model, lops)
			out = append(out, Violation{Check: "linearizable", Lock: l, At: at,
				Text: fmt.Sprintf("the grants, releases and ends of %s called up to %s fit no sequence of one holder at a time with growing tokens (of %d in all)", l, ms(at), len(lops))})
		case porcupine.Unknown:
			out = append(out, Violation{Check: "linearizable", Lock: l, At: lastCall(lops), Text: "porcupine could not decide within a minute"})
		}
	}
	return out, visual
}

func lastCall(ops []porcupine.Operation) time.Duration {
	var last int64
	for _, op := range ops {
		last = max(last, op.Call)
	}
	return time.Duration(last)
}

// firstIllegal shrinks an illegal history to its shortest illegal prefix
// (by call time) and returns the last call in it: where the history first
// goes wrong.
func firstIllegal(model porcupine.Model, ops []porcupine.Operation) time.Duration {
	sorted := append([]porcupine.Operation(nil), ops...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	n := sort.Search(len(sorted), func(n int) bool {
		return porcupine.CheckOperationsTimeout(model, sorted[:n+1], 10*time.Second) == porcupine.Illegal
	})
	if n >= len(sorted) {
		return lastCall(sorted)
	}
	return time.Duration(sorted[n].Call)
}
