package wire

import "github.com/fairlock/fairlock/backend"

// MemoryPolicy is one run of memory_policy.lua: the server's memory limit
// and eviction policy.
func MemoryPolicy(s *Scripts) backend.Call { return backend.Call{Script: s.memoryPolicy} }

// Memory is memory_policy.lua's reply.
type Memory struct {
	MaxMemory int64  // bytes; 0: no limit
	Policy    string // maxmemory-policy, e.g. "noeviction"
}

// Evicts reports whether the server may evict keys when its memory is
// full. Every lock key carries a TTL, so the volatile-* policies may
// evict them as well as the allkeys-* ones; only noeviction, or no limit,
// keeps them.
func (m Memory) Evicts() bool { return m.MaxMemory > 0 && m.Policy != "noeviction" }

// DecodeMemory decodes memory_policy.lua's reply.
func DecodeMemory(rep backend.Reply) (Memory, error) {
	if len(rep.Elems) != 2 {
		return Memory{}, unexpected("memory_policy", rep)
	}
	limit, err := rep.Elems[0].AsInt()
	if err != nil || limit < 0 {
		return Memory{}, unexpected("memory_policy", rep)
	}
	policy := rep.Elems[1]
	if policy.Kind != backend.String || policy.Str == "" {
		return Memory{}, unexpected("memory_policy", rep)
	}
	return Memory{MaxMemory: limit, Policy: policy.Str}, nil
}
