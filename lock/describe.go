package lock

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fairlock/fairlock/backend"
	"github.com/fairlock/fairlock/lock/inspect"
	"github.com/fairlock/fairlock/lock/internal/wire"
)

// Client descriptions (WithDescription) and what Inspect tells of owners.

// describeTimeout bounds one write, delete or read of descriptions.
const describeTimeout = time.Second

// maxDescriptionName is the longest name WithDescription accepts, in bytes.
const maxDescriptionName = 256

func (c *Client) descriptionKey(clientID string) string {
	return c.cfg.keyPrefix + wire.DescriptionPrefix + clientID
}

// describeEvery is how often a client rewrites its description: every
// third of the watchdog lease, at most once a second. The key lives three
// times that, so it goes about when a crashed client's renewed holds do.
func describeEvery(lease time.Duration) time.Duration {
	return max(lease/3, time.Second)
}

// describe keeps the client's description in Redis until stop: written
// at once and every describeEvery, deleted at stop. A failed write is
// retried at the next tick; the key outlives two missed writes. It is the
// description writer's job (WithDescription only); Close stops it.
func (c *Client) describe(stop <-chan struct{}) {
	value, err := json.Marshal(c.cfg.description)
	if err != nil { // a struct of strings and an int always encodes
		return
	}
	every := describeEvery(c.cfg.lease)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), describeTimeout)
		_ = c.writeDescription(ctx, string(value), 3*every)
		cancel()
		select {
		case <-stop:
			ctx, cancel := context.WithTimeout(context.Background(), describeTimeout)
			defer cancel()
			_ = c.writeDescription(ctx, "", 0)
			return
		case <-t.C:
		}
	}
}

// writeDescription runs describe.lua: sets the client's description to
// value for ttl, or deletes it when value is "".
func (c *Client) writeDescription(ctx context.Context, value string, ttl time.Duration) error {
	call := wire.Describe{Key: c.descriptionKey(c.id), Value: value, TTL: ttl}.Call(c.scripts)
	_, err := c.b.Eval(ctx, call.Script, call.Keys, call.Args)
	return err
}

// describeOwners fills in the Description and Kind of st's holders and
// waiters: the kinds from snap, the state st was made of, the
// descriptions from one pipelined batch of a read_description.lua run per
// client ID (each key in its own slot). When the batch fails, st keeps
// the kinds, and st.DescriptionErr says why.
func (c *Client) describeOwners(ctx context.Context, m *Mutex, st *inspect.State, snap wire.Snapshot) {
	if len(st.Holders) == 0 && len(st.Queue) == 0 {
		return
	}
	o := newOwnerIndex(c.id)
	o.learn(snap)
	calls := make([]backend.Call, len(o.clients))
	for i, id := range o.clients {
		calls[i] = wire.ReadDescription(c.scripts, c.descriptionKey(id))
	}
	results, err := c.readDescriptions(ctx, calls)
	if err == nil {
		replies := make([]backend.Reply, len(results))
		for i, r := range results {
			replies[i] = r.Reply
		}
		err = o.setDescriptions(replies)
	}
	if err != nil {
		st.DescriptionErr = fmt.Errorf("lock %q: client descriptions: %w", m.name, err)
	}
	o.fill(st)
}

// ownerIndex is what Inspect learns of each client ID among a lock's
// holders and waiters.
type ownerIndex struct {
	self    string   // the inspecting client's ID: a fairlock client
	clients []string // distinct client IDs, in order of appearance
	known   map[string]*ownerFacts
}

func newOwnerIndex(self string) *ownerIndex {
	return &ownerIndex{self: self, known: map[string]*ownerFacts{}}
}

// facts returns what is known of owner's client, nil for an owner field
// of another form.
func (o *ownerIndex) facts(owner string) *ownerFacts {
	id, _, err := inspect.ParseOwner(owner)
	if err != nil {
		return nil
	}
	f := o.known[id]
	if f == nil {
		f = &ownerFacts{fairlock: id == o.self}
		o.known[id] = f
		o.clients = append(o.clients, id)
	}
	return f
}

// learn takes the evidence of a snapshot: which listed waiters
// heartbeat, and the hash's and the counter's expiries for the holders.
func (o *ownerIndex) learn(snap wire.Snapshot) {
	for _, w := range snap.Queue {
		switch f := o.facts(w.Owner); {
		case f == nil:
		case w.Heartbeats:
			f.fairlock = true
		default:
			f.redisson = true
		}
	}
	for _, h := range snap.Holders {
		o.facts(h.Owner)
	}
	if len(snap.Holders) > 0 {
		o.holderEvidence(snap.Holders, snap.HashTTL, snap.TokenTTL)
	}
}

// setDescriptions decodes one description read (read_description.lua or
// GET) per client, in o.clients' order. A malformed description is
// reported and skipped; the others still count.
func (o *ownerIndex) setDescriptions(replies []backend.Reply) error {
	if len(replies) != len(o.clients) {
		return fmt.Errorf("%w: %d description replies for %d clients", ErrUnexpectedReply, len(replies), len(o.clients))
	}
	var errs []error
	for i, id := range o.clients {
		switch rep := replies[i]; rep.Kind {
		case backend.Nil:
		case backend.String:
			var d inspect.Description
			if err := json.Unmarshal([]byte(rep.Str), &d); err != nil {
				errs = append(errs, fmt.Errorf("%w: description of client %s: %v", ErrUnexpectedReply, id, err))
				continue
			}
			o.known[id].desc = &d
		default:
			errs = append(errs, fmt.Errorf("%w: read_description: %v", ErrUnexpectedReply, rep))
		}
	}
	return joinLine(errs...)
}

// fill sets the Kind and Description of st's holders and waiters.
func (o *ownerIndex) fill(st *inspect.State) {
	for i := range st.Holders {
		st.Holders[i].Kind, st.Holders[i].Description = o.facts(st.Holders[i].Owner).describe()
	}
	for i := range st.Queue {
		st.Queue[i].Kind, st.Queue[i].Description = o.facts(st.Queue[i].Owner).describe()
	}
}

// holderEvidence tells a fairlock holder from a Redisson one by the
// fencing counter: fairlock keeps the counter alive at least as long as
// any hold it issues a token for (base.lua: next_token; prelude.lua:
// extend), while
// Redisson never touches it. hash and token are the two keys' PTTLs, read
// together; a hash without expiry says nothing. A Redisson hold taken just
// after a fairlock hold with a longer lease can pass for fairlock while
// that counter lives: it is evidence, not proof.
func (o *ownerIndex) holderEvidence(holders []wire.Holder, hash, token int64) {
	if hash < 0 {
		return
	}
	for _, h := range holders {
		if f := o.facts(h.Owner); f != nil {
			f.fairlock = f.fairlock || token >= hash
			f.redisson = f.redisson || token < hash
		}
	}
}

// ownerFacts is what Inspect learnt of one client ID.
type ownerFacts struct {
	desc     *inspect.Description
	fairlock bool // evidence of a fairlock client
	redisson bool // a waiter of this client without a liveness deadline
}

// describe returns the client's kind and a copy of its description (nil:
// none) for one owner entry; f is nil for an owner field of another form.
func (f *ownerFacts) describe() (inspect.Kind, *inspect.Description) {
	if f == nil {
		return inspect.KindUnknown, nil
	}
	var d *inspect.Description
	if f.desc != nil {
		cp := *f.desc
		d = &cp
	}
	switch {
	case f.fairlock || d != nil:
		return inspect.KindFairlock, d
	case f.redisson:
		return inspect.KindRedisson, nil
	}
	return inspect.KindUnknown, nil
}

// readDescriptions sends the batch, again after a transient error (it
// changes nothing), at most readAttempts times.
func (c *Client) readDescriptions(ctx context.Context, calls []backend.Call) ([]backend.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	var results []backend.Result
	err := c.retryRead(ctx, func() error {
		results = c.b.EvalBatch(ctx, calls)
		return batchErr(results, len(calls))
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// batchErr returns the first error of a batch's results, or one for a
// batch that returned the wrong number of them.
func batchErr(results []backend.Result, calls int) error {
	if len(results) != calls {
		return fmt.Errorf("%w: batch returned %d results for %d calls", ErrUnexpectedReply, len(results), calls)
	}
	for _, r := range results {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
