package main

// The model of scenario (d): what larger deployments cost, from the
// figures the cluster benchmark measured. It is arithmetic only, so that
// it can be checked without a server:
//
//   - memory: a held lock, an idle name and a waiter each cost what they
//     cost on the measured cluster, and lock names spread evenly over the
//     shards (CRC16 of the name);
//   - bus: Redis Cluster sends each PUBLISH over the bus to every other
//     node, replicas included, and each SPUBLISH to the other nodes of the
//     slot's shard only (its replicas); the publishes per acquisition are
//     those measured at the slot's primary;
//   - commands: per acquisition, the slot's primary, each of its replicas
//     and the nodes outside the shard (together) run what they ran on the
//     measured cluster; the last part spreads evenly over the nodes outside
//     the shard.

// modelInputs are the measured figures the model starts from.
type modelInputs struct {
	HeldBytes  float64 `json:"held_bytes"`  // per held lock, primary
	IdleBytes  float64 `json:"idle_bytes"`  // per idle name within lease + 1 s of its unlock (token counter)
	FreshBytes float64 `json:"fresh_bytes"` // per name within 3 s of its unlock (token counter and unlock latch)
	// SpreadWaiterBytes: per waiter, one waiter on each of many locks;
	// QueuedWaiterBytes: per waiter, many waiters queued on one lock.
	SpreadWaiterBytes float64      `json:"spread_waiter_bytes"`
	QueuedWaiterBytes float64      `json:"queued_waiter_bytes"`
	Modes             []modeInputs `json:"modes"`
}

// modeInputs are one publish mode's figures per acquisition.
type modeInputs struct {
	Mode     string  `json:"mode"`
	Publish  float64 `json:"publish"`  // PUBLISH calls at the slot's primary
	SPublish float64 `json:"spublish"` // SPUBLISH calls at the slot's primary
	// Commands (every command, scripts' own included) at the slot's
	// primary, at each of its replicas, and at all other nodes together.
	OwnerCmds, ReplicaCmds, ElseCmds float64
	// Pub/sub commands (PUBLISH, SPUBLISH, [S]SUBSCRIBE, [S]UNSUBSCRIBE)
	// likewise.
	OwnerPubSub, ReplicaPubSub, ElsePubSub float64
}

// deployment is what the model projects to.
type deployment struct {
	Shards          int     // primaries
	Replicas        int     // replicas per primary
	HandoversPerMin float64 // acquisitions a minute, all locks
}

func (d deployment) nodes() int { return d.Shards * (1 + d.Replicas) }

// memoryPerShard returns the bytes each primary holds for count items of
// per bytes each, spread evenly (a replica holds the same again).
func memoryPerShard(count, per float64, shards int) float64 {
	if shards <= 0 {
		return 0
	}
	return count * per / float64(shards)
}

// rates are one mode's per-node rates in a deployment, per second.
type rates struct {
	Mode string
	// Bus publish messages (PUBLISH and SPUBLISH together): sent by each
	// primary, received by each primary and by each replica.
	BusSentPrimary, BusRecvPrimary, BusRecvReplica float64
	// Commands, and pub/sub commands among them, at each primary and at
	// each replica.
	CmdsPrimary, CmdsReplica, PubSubPrimary, PubSubReplica float64
}

// project returns m's rates in d, locks used evenly over the shards.
func project(m modeInputs, d deployment) rates {
	r := rates{Mode: m.Mode}
	if d.Shards <= 0 {
		return r
	}
	total := d.HandoversPerMin / 60       // acquisitions a second
	perShard := total / float64(d.Shards) // whose slot a given primary owns
	others := total - perShard            // whose slot it does not
	n := float64(d.nodes())
	// Every PUBLISH goes from the slot's primary to the n-1 other nodes;
	// every SPUBLISH to the shard's replicas.
	r.BusSentPrimary = perShard * (m.Publish*(n-1) + m.SPublish*float64(d.Replicas))
	// A node hears every PUBLISH of every other shard, and of its own
	// shard when it is a replica; a replica hears its primary's SPUBLISH.
	r.BusRecvPrimary = others * m.Publish
	r.BusRecvReplica = total*m.Publish + perShard*m.SPublish
	// The part of the commands that falls outside the shard spreads over
	// the nodes outside it.
	outside := n - 1 - float64(d.Replicas)
	spill := func(x float64) float64 {
		if outside <= 0 {
			return 0
		}
		return others * x / outside
	}
	r.CmdsPrimary = perShard*m.OwnerCmds + spill(m.ElseCmds)
	r.CmdsReplica = perShard*m.ReplicaCmds + spill(m.ElseCmds)
	r.PubSubPrimary = perShard*m.OwnerPubSub + spill(m.ElsePubSub)
	r.PubSubReplica = perShard*m.ReplicaPubSub + spill(m.ElsePubSub)
	return r
}

// busPerAcquisition returns the bus publish messages per acquisition the
// model expects on a whole cluster: what the measured cluster can check.
func busPerAcquisition(m modeInputs, d deployment) float64 {
	return m.Publish*float64(d.nodes()-1) + m.SPublish*float64(d.Replicas)
}
