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

// linModel is one lock whose fencing counter stands at token at first.
func linModel(token int64) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return linState{token: token} },
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
// it) and which hold it is of.
func linOps(lock string, ops []*Op, holds []*Hold, b Bounds) ([]porcupine.Operation, []string, []*Hold) {
	var out []porcupine.Operation
	var what []string
	var holdOf []*Hold
	add := func(in linInput, call, ret time.Duration, w fmt.Stringer, h *Hold) {
		out = append(out, porcupine.Operation{ClientId: len(out), Input: in, Call: int64(call), Return: int64(ret)})
		what = append(what, w.String())
		holdOf = append(holdOf, h)
	}
	released := map[*Hold]bool{}
	for _, op := range ops {
		switch {
		case op.Lock != lock:
		case op.Kind.acquire() && op.Hold != nil && op.New:
			add(linInput{kind: linAcquire, owner: op.Owner, java: op.Java, token: op.Hold.Token}, op.Call, op.Return, op, op.Hold)
		case op.Kind == KindUnlock && op.Final:
			add(linInput{kind: linRelease, owner: op.Owner}, op.Call, op.Return, op, op.Hold)
			released[op.Hold] = true
		}
	}
	for _, h := range holds {
		if h.Lock != lock || released[h] {
			continue
		}
		// A hold may end (its lease runs out, someone force-unlocks it)
		// before the reply granting it reaches its owner: from the call.
		add(linInput{kind: linEnd, owner: h.Owner, java: h.Java, token: h.Token}, h.Called, endBy(h, b), endOf{h}, h)
	}
	return out, what, holdOf
}

// segments splits a lock's operations at its quiet moments: every
// operation before one returned before any after it was called, and no
// hold has operations on both sides. Any order that explains the whole
// history places everything before such a moment first, and there the
// lock is free - or nothing after it takes or releases it, since only a
// hold's own release or end frees it - with the fencing counter at the
// largest Go token granted before it. So each segment, checked on its own
// from that state, is legal when the whole history is: a segment found
// illegal is a violation of the whole, and porcupine's search, exponential
// in the operations that overlap, stays within one segment (a 30-minute
// history of one busy lock in one piece was more than it could decide in a
// minute, seed 73389739331330).
func segments(lops []porcupine.Operation, holdOf []*Hold) [][]int {
	spanEnd := map[*Hold]int64{}
	for i, op := range lops {
		if h := holdOf[i]; h != nil {
			spanEnd[h] = max(spanEnd[h], op.Return)
		}
	}
	order := make([]int, len(lops))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lops[order[a]].Call < lops[order[b]].Call })
	var out [][]int
	var cur []int
	end := int64(-1 << 62)
	for _, i := range order {
		if len(cur) > 0 && lops[i].Call > end {
			out = append(out, cur)
			cur = nil
		}
		cur = append(cur, i)
		end = max(end, lops[i].Return)
		if h := holdOf[i]; h != nil {
			end = max(end, spanEnd[h])
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
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
	for _, l := range names {
		lops, what, holdOf := linOps(l, ops, holds, b)
		if v, html := checkLock(l, lops, what, holdOf); v != nil {
			out = append(out, *v)
			if html != nil {
				visual[l] = html
			}
		}
	}
	return out, visual
}

// decideWithin bounds porcupine's search of one segment; one it cannot
// decide in that time is a violation. The soak runs under the race
// detector, which makes porcupine some 30 times slower: a busy lock's
// 30-minute history with no quiet moment, one segment of 8,872
// operations, took 2.2 s without it and 58 s with it, and more than a
// minute within the run (seed 178256833430518).
const decideWithin = 10 * time.Minute

// checkLock runs porcupine on each segment of one lock's history, in
// order, and returns the first violation, with porcupine's visualisation
// of an illegal segment.
func checkLock(l string, lops []porcupine.Operation, what []string, holdOf []*Hold) (*Violation, []byte) {
	var token int64 // the counter after the segments checked
	for _, seg := range segments(lops, holdOf) {
		sops := make([]porcupine.Operation, len(seg))
		swhat := make([]string, len(seg))
		for j, i := range seg {
			sops[j], swhat[j] = lops[i], what[i]
			sops[j].ClientId = j
		}
		model := linModel(token)
		res, info := porcupine.CheckOperationsVerbose(model, sops, decideWithin)
		switch res {
		case porcupine.Illegal:
			var buf bytes.Buffer
			var html []byte
			if err := porcupine.Visualize(model, info, &buf); err == nil {
				html = buf.Bytes()
			}
			v := stuck(l, sops, swhat, info)
			return &v, html
		case porcupine.Unknown:
			return &Violation{Check: "linearizable", Lock: l, At: lastCall(sops), Text: fmt.Sprintf("porcupine could not decide within %v on %d operations", decideWithin, len(sops))}, nil
		}
		for _, op := range sops {
			if in := op.Input.(linInput); in.kind == linAcquire && !in.java {
				token = max(token, in.token)
			}
		}
	}
	return nil, nil
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
