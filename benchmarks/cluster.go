package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// redisCluster is a Redis Cluster this run starts on loopback: primaries
// with the 16384 slots in even ranges (primary i has the i-th), and
// replicas, replica j replicating primary j % len(primaries).
type redisCluster struct {
	primaries []*redisServer
	replicas  []*redisServer
}

const clusterSlots = 16384

// nodes returns every node, primaries first.
func (c *redisCluster) nodes() []*redisServer {
	return append(append([]*redisServer(nil), c.primaries...), c.replicas...)
}

// addrs returns the primaries' addresses (a cluster client's seeds).
func (c *redisCluster) addrs() []string {
	out := make([]string, len(c.primaries))
	for i, p := range c.primaries {
		out[i] = p.addr
	}
	return out
}

func (c *redisCluster) stop() {
	for _, n := range c.nodes() {
		n.stop()
	}
}

// nodeName names node i of nodes() for the tables: "p1" .. "pN" for the
// primaries, "r1" .. for the replicas ("r1" replicates "p1").
func (c *redisCluster) nodeName(i int) string {
	if i < len(c.primaries) {
		return "p" + strconv.Itoa(i+1)
	}
	return "r" + strconv.Itoa(i-len(c.primaries)+1)
}

// primaryOf returns the index of the primary that owns slot.
func (c *redisCluster) primaryOf(slot int) int {
	n := len(c.primaries)
	for i := range n {
		if slot <= (i+1)*clusterSlots/n-1 {
			return i
		}
	}
	return n - 1
}

// freeClusterPort returns a free loopback port below 55535 whose cluster
// bus port (port + 10000) is free as well.
func freeClusterPort() (int, error) {
	for range 100 {
		port, err := freePort()
		if err != nil {
			return 0, err
		}
		if port+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		l.Close()
		return port, nil
	}
	return 0, errors.New("no free port pair for a cluster node")
}

// startCluster starts primaries cluster-enabled nodes with replicas
// replicas each, joins them and waits (at most 60 s) until every node
// reports cluster_state:ok, knows every other node, and every replica's
// link to its primary is up.
func startCluster(ctx context.Context, binary, dir string, primaries, replicas int) (_ *redisCluster, err error) {
	c := &redisCluster{}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	total := primaries * (1 + replicas)
	for i := range total {
		var s *redisServer
		for try := 0; ; try++ {
			port, perr := freeClusterPort()
			if perr != nil {
				return nil, perr
			}
			nd := filepath.Join(dir, "node"+strconv.Itoa(i))
			if err := os.MkdirAll(nd, 0o755); err != nil {
				return nil, err
			}
			s, err = startRedisAt(binary, nd, port,
				"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nd, "nodes.conf"),
				"--cluster-node-timeout", "5000")
			if err == nil || try == 2 {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("cluster node %d: %w", i, err)
		}
		if i < primaries {
			c.primaries = append(c.primaries, s)
		} else {
			c.replicas = append(c.replicas, s)
		}
	}
	all := c.nodes()
	var ids []string // node IDs, primaries then replicas
	for _, n := range all {
		id, err := n.do(ctx, "CLUSTER", "MYID").ToString()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER MYID: %w", err)
		}
		ids = append(ids, id)
	}
	for i, p := range c.primaries {
		// Distinct config epochs, as redis-cli --cluster create does.
		if err := p.do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)).Error(); err != nil {
			return nil, fmt.Errorf("SET-CONFIG-EPOCH: %w", err)
		}
		lo, hi := i*clusterSlots/primaries, (i+1)*clusterSlots/primaries-1
		if err := p.do(ctx, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)).Error(); err != nil {
			return nil, fmt.Errorf("ADDSLOTSRANGE: %w", err)
		}
	}
	for _, n := range all[1:] {
		host, port, _ := net.SplitHostPort(n.addr)
		if err := all[0].do(ctx, "CLUSTER", "MEET", host, port).Error(); err != nil {
			return nil, fmt.Errorf("CLUSTER MEET: %w", err)
		}
	}
	// A replica can only replicate a primary it knows.
	if err := waitFor(ctx, 30*time.Second, func() (bool, string) {
		for i, n := range all {
			info, err := n.clusterInfo(ctx)
			if err != nil {
				return false, err.Error()
			}
			if info["cluster_known_nodes"] != strconv.Itoa(total) {
				return false, fmt.Sprintf("%s knows %s nodes", c.nodeName(i), info["cluster_known_nodes"])
			}
		}
		return true, ""
	}); err != nil {
		return nil, err
	}
	for j, r := range c.replicas {
		if err := r.do(ctx, "CLUSTER", "REPLICATE", ids[j%primaries]).Error(); err != nil {
			return nil, fmt.Errorf("CLUSTER REPLICATE: %w", err)
		}
	}
	if err := waitFor(ctx, 60*time.Second, func() (bool, string) {
		for i, n := range all {
			info, err := n.clusterInfo(ctx)
			if err != nil {
				return false, err.Error()
			}
			if info["cluster_state"] != "ok" || info["cluster_slots_ok"] != strconv.Itoa(clusterSlots) || info["cluster_known_nodes"] != strconv.Itoa(total) {
				return false, fmt.Sprintf("%s: cluster_state:%s slots_ok:%s known:%s", c.nodeName(i), info["cluster_state"], info["cluster_slots_ok"], info["cluster_known_nodes"])
			}
		}
		for j, r := range c.replicas {
			repl, err := r.info(ctx, "replication")
			if err != nil {
				return false, err.Error()
			}
			if repl["role"] != "slave" || repl["master_link_status"] != "up" {
				return false, fmt.Sprintf("%s: role %s, link %s", c.nodeName(primaries+j), repl["role"], repl["master_link_status"])
			}
		}
		// Every node must see the replicas as replicas, or a client may
		// route to one as a primary.
		for i, n := range all {
			nodes, err := n.do(ctx, "CLUSTER", "NODES").ToString()
			if err != nil {
				return false, err.Error()
			}
			if strings.Count(nodes, "slave") != len(c.replicas) {
				return false, c.nodeName(i) + " does not see every replica yet"
			}
		}
		return true, ""
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// waitFor polls cond every 50 ms until it is true, timeout passes or ctx
// ends; the error names cond's last status.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, status := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ready after %v: %s", timeout, status)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterInfo returns CLUSTER INFO's fields.
func (s *redisServer) clusterInfo(ctx context.Context) (map[string]string, error) {
	text, err := s.do(ctx, "CLUSTER", "INFO").ToString()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER INFO: %w", err)
	}
	return parseInfo(text), nil
}

// busStats are a node's cluster-bus pub/sub message counters (CLUSTER
// INFO cluster_stats_messages_publish[shard]_{sent,received}; publishshard
// is Redis 7.0+).
type busStats struct {
	PublishSent     int64 `json:"publish_sent"`
	PublishReceived int64 `json:"publish_received"`
	ShardSent       int64 `json:"publishshard_sent"`
	ShardReceived   int64 `json:"publishshard_received"`
	AllSent         int64 `json:"all_sent"` // every message type, pings and pongs too
	AllRecv         int64 `json:"all_received"`
}

func (s *redisServer) busStats(ctx context.Context) (busStats, error) {
	info, err := s.clusterInfo(ctx)
	if err != nil {
		return busStats{}, err
	}
	n := func(k string) int64 { v, _ := infoInt(info, "cluster_stats_messages_"+k); return v }
	return busStats{
		PublishSent: n("publish_sent"), PublishReceived: n("publish_received"),
		ShardSent: n("publishshard_sent"), ShardReceived: n("publishshard_received"),
		AllSent: n("sent"), AllRecv: n("received"),
	}, nil
}

func (b busStats) minus(a busStats) busStats {
	return busStats{
		PublishSent: b.PublishSent - a.PublishSent, PublishReceived: b.PublishReceived - a.PublishReceived,
		ShardSent: b.ShardSent - a.ShardSent, ShardReceived: b.ShardReceived - a.ShardReceived,
		AllSent: b.AllSent - a.AllSent, AllRecv: b.AllRecv - a.AllRecv,
	}
}
