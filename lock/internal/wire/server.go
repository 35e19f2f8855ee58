package wire

import (
	"strconv"
	"strings"

	"github.com/fairlock/fairlock/backend"
)

// ServerInfo is one run of server_info.lua: the server's memory limit,
// eviction policy and version.
func ServerInfo(s *Scripts) backend.Call { return backend.Call{Script: s.serverInfo} }

// Server is server_info.lua's reply.
type Server struct {
	MaxMemory int64  // bytes; 0: no limit
	Policy    string // maxmemory-policy, e.g. "noeviction"
	Version   string // redis_version, e.g. "7.0.15"
}

// Evicts reports whether the server may evict keys when its memory is
// full. Every lock key carries a TTL, so the volatile-* policies may
// evict them as well as the allkeys-* ones; only noeviction, or no limit,
// keeps them.
func (m Server) Evicts() bool { return m.MaxMemory > 0 && m.Policy != "noeviction" }

// ShardedPubSub reports whether the server has sharded pub/sub (SPUBLISH,
// SSUBSCRIBE): Redis 7.0 or later (Valkey reports 7.2 or later).
func (m Server) ShardedPubSub() bool {
	major, _, _ := strings.Cut(m.Version, ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 7
}

// DecodeServer decodes server_info.lua's reply.
func DecodeServer(rep backend.Reply) (Server, error) {
	if len(rep.Elems) != 3 {
		return Server{}, unexpected("server_info", rep)
	}
	limit, err := rep.Elems[0].AsInt()
	if err != nil || limit < 0 {
		return Server{}, unexpected("server_info", rep)
	}
	policy, version := rep.Elems[1], rep.Elems[2]
	if policy.Kind != backend.String || policy.Str == "" || version.Kind != backend.String || version.Str == "" {
		return Server{}, unexpected("server_info", rep)
	}
	return Server{MaxMemory: limit, Policy: policy.Str, Version: version.Str}, nil
}
