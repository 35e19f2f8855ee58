package backend

import (
	"fmt"
	"strconv"
)

// Kind is the type of a Reply.
type Kind int

// Reply kinds.
const (
	Nil Kind = iota
	Int
	String
	Array
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Nil:
		return "nil"
	case Int:
		return "integer"
	case String:
		return "string"
	case Array:
		return "array"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Reply is a decoded server reply: nil, integer, string or array. Lua
// numbers arrive as integers, Lua strings as strings, tables as arrays and
// false as nil.
type Reply struct {
	Kind  Kind
	Int   int64
	Str   string
	Elems []Reply
}

// IntReply returns an integer reply.
func IntReply(n int64) Reply { return Reply{Kind: Int, Int: n} }

// StringReply returns a string reply.
func StringReply(s string) Reply { return Reply{Kind: String, Str: s} }

// ArrayReply returns an array reply.
func ArrayReply(elems ...Reply) Reply { return Reply{Kind: Array, Elems: elems} }

// AsInt returns the reply as an integer; a string holding a decimal integer
// is accepted too.
func (r Reply) AsInt() (int64, error) {
	switch r.Kind {
	case Int:
		return r.Int, nil
	case String:
		n, err := strconv.ParseInt(r.Str, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %q is not an integer", ErrUnexpectedReply, r.Str)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%w: want integer, got %s", ErrUnexpectedReply, r.Kind)
}

// AsInts returns an array reply of integers.
func (r Reply) AsInts() ([]int64, error) {
	if r.Kind != Array {
		return nil, fmt.Errorf("%w: want array, got %s", ErrUnexpectedReply, r.Kind)
	}
	out := make([]int64, len(r.Elems))
	for i, e := range r.Elems {
		n, err := e.AsInt()
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}
