package wire

import (
	"strconv"
	"strings"
	"time"
)

// The wake-up messages the scripts publish on an owner's channel
// (prelude.lua: notify, wake, hand_over_to):
//
//	"0"                        Redisson's unlock message: check again
//	"head:<ms>"                you are first in line; the hold has ms left
//	"grant:<token>:<server µs>" you hold the lock, with this token, granted then
//
// and on a client's own channel (ClientChannelPrefix + client ID; tell_evicted):
//
//	"lost:<token>:<lock hash>"  the hold of this token on this lock was force-unlocked or deleted
//
// Redisson waiters read every message as "check again".

// MessageKind says what a wake-up message announces.
type MessageKind int

// Message kinds.
const (
	// Recheck: check again (Redisson's "0", or anything not understood).
	Recheck MessageKind = iota
	// Head: the owner is first in line behind a hold with TTL left.
	Head
	// Grant: a release granted the owner the lock (one-message hand-over).
	Grant
	// Lost: someone else force-unlocked or deleted the hold of Token on
	// the lock whose hash is Key.
	Lost
)

// Message is a decoded wake-up message.
type Message struct {
	Kind  MessageKind
	TTL   time.Duration // Head: the hold's time left
	Token int64         // Grant: the fencing token of the new hold; Lost: of the hold ended
	At    int64         // Grant: the server's time of the grant, µs
	Key   string        // Lost: the lock hash
}

const (
	headPrefix  = "head:"
	grantPrefix = "grant:"
	lostPrefix  = "lost:"
)

// ParseMessage decodes a payload; a malformed head or grant is a plain
// Recheck, which costs the waiter only a round trip.
func ParseMessage(payload string) Message {
	if rest, ok := strings.CutPrefix(payload, headPrefix); ok {
		ms, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || ms <= 0 {
			return Message{}
		}
		return Message{Kind: Head, TTL: time.Duration(ms) * time.Millisecond}
	}
	if rest, ok := strings.CutPrefix(payload, lostPrefix); ok {
		t, key, ok := strings.Cut(rest, ":")
		token, err := strconv.ParseInt(t, 10, 64)
		if !ok || err != nil || token <= 0 || key == "" {
			return Message{}
		}
		return Message{Kind: Lost, Token: token, Key: key}
	}
	rest, ok := strings.CutPrefix(payload, grantPrefix)
	if !ok {
		return Message{}
	}
	t, at, ok := strings.Cut(rest, ":")
	token, err1 := strconv.ParseInt(t, 10, 64)
	us, err2 := strconv.ParseInt(at, 10, 64)
	if !ok || err1 != nil || err2 != nil || token <= 0 {
		return Message{}
	}
	return Message{Kind: Grant, Token: token, At: us}
}

// String encodes the message as the scripts publish it.
func (m Message) String() string {
	switch m.Kind {
	case Head:
		return headPrefix + strconv.FormatInt(m.TTL.Milliseconds(), 10)
	case Grant:
		return grantPrefix + strconv.FormatInt(m.Token, 10) + ":" + strconv.FormatInt(m.At, 10)
	case Lost:
		return lostPrefix + strconv.FormatInt(m.Token, 10) + ":" + m.Key
	}
	return "0"
}
