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

// linOps turns the history of one lock into porcupine operations, and
// says what each one is (an operation or a hold, as the history prints
// it).
func linOps(lock string, ops []*Op, holds []*Hold, b Bounds) ([]porcupine.Operation, []string) {
	var out []porcupine.Operation
	var what []string
	add := func(in linInput, call, ret time.Duration, w fmt.Stringer) {
		out = append(out, porcupine.Operation{ClientId: len(out), Input: in, Call: int64(call), Return: int64(ret)})
		what = append(what, w.String())
	}
	released := map[*Hold]bool{}
	for _, op := range ops {
		switch {
		case op.Lock != lock:
		case op.Kind.acquire() && op.Hold != nil && op.New:
			add(linInput{kind: linAcquire, owner: op.Owner, java: op.Java, token: op.Hold.Token}, op.Call, op.Return, op)
		case op.Kind == KindUnlock && op.Final:
			add(linInput{kind: linRelease, owner: op.Owner}, op.Call, op.Return, op)
			released[op.Hold] = true
		}
	}
	for _, h := range holds {
		if h.Lock != lock || released[h] {
			continue
		}
		// A hold may end (its lease runs out, someone force-unlocks it)
		// before the reply granting it reaches its owner: from the call.
		add(linInput{kind: linEnd, owner: h.Owner, java: h.Java, token: h.Token}, h.Called, endBy(h, b), endOf{h})
	}
	return out, what
}

// endBy is the latest a hold that was not released can have ended: when
// its owner knew, plus the notice bound (a client that watches no keys
// learns of a DEL by hand by its watchdog's tick); open at the end of the
// history when the owner never knew.
func endBy(h *Hold, b Bounds) time.Duration {
	done, _ := h.Done()
	switch {
	case done == 0:
		return 1 << 62
	case !h.Watches && !h.Java:
		return done + b.Tick
	}
	return done + b.Notice
}

// endOf prints a hold's end as a linearizability operation.
type endOf struct{ h *Hold }

func (e endOf) String() string { return "the end of " + e.h.String() }

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
		lops, what := linOps(l, ops, holds, b)
		res, info := porcupine.CheckOperationsVerbose(model, lops, time.Minute)
		switch res {
		case porcupine.Illegal:
			var buf bytes.Buffer
			if err := porcupine.Visualize(model, info, &buf); err == nil {
				visual[l] = buf.Bytes()
			}
			out = append(out, stuck(l, lops, what, info))
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

// stuck says where an illegal history goes wrong: porcupine's longest
// partial linearization explains some operations one at a time; of the
// rest, the one that returned first could not be placed after it - the
// history breaks there.
func stuck(lock string, lops []porcupine.Operation, what []string, info porcupine.LinearizationInfo) Violation {
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	placed := make(map[int]bool, len(longest))
	for _, id := range longest {
		placed[id] = true
	}
	first := -1
	for id, op := range lops {
		if !placed[id] && (first < 0 || op.Return < lops[first].Return) {
			first = id
		}
	}
	v := Violation{Check: "linearizable", Lock: lock, At: lastCall(lops)}
	if first < 0 {
		v.Text = fmt.Sprintf("porcupine found the %d grants, releases and ends of %s illegal but explained all of them", len(lops), lock)
		return v
	}
	v.At = time.Duration(lops[first].Return)
	last := "nothing"
	if len(longest) > 0 {
		last = what[longest[len(longest)-1]]
	}
	v.Text = fmt.Sprintf("no sequence of one holder at a time with growing tokens explains %s's history past %d of its %d grants, releases and ends: the longest ends with %s; it cannot place %s",
		lock, len(longest), len(lops), last, what[first])
	return v
}
