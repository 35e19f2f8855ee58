package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/lock/inspect"
	"github.com/fairlock/fairlock/redistest"
)

// inspectJSON is inspect's --json output, as documented.
type inspectJSON struct {
	Name       string    `json:"name"`
	Key        string    `json:"key"`
	ServerTime time.Time `json:"server_time"`
	Locked     bool      `json:"locked"`
	Holders    []struct {
		Owner       string           `json:"owner"`
		ClientID    string           `json:"client_id"`
		OwnerID     int64            `json:"owner_id"`
		Count       int              `json:"count"`
		Description *descriptionJSON `json:"description"`
		Kind        string           `json:"kind"`
	} `json:"holders"`
	LeaseLeft   float64 `json:"lease_left_ms"`
	Token       int64   `json:"token"`
	QueueLength int     `json:"queue_length"`
	Queue       []struct {
		Position    int              `json:"position"`
		Owner       string           `json:"owner"`
		ClientID    string           `json:"client_id"`
		OwnerID     int64            `json:"owner_id"`
		Deadline    *time.Time       `json:"deadline"`
		DeadlineIn  float64          `json:"deadline_in_ms"`
		Dead        bool             `json:"dead"`
		Description *descriptionJSON `json:"description"`
		Kind        string           `json:"kind"`
	} `json:"queue"`
	Warnings []string `json:"warnings"`
	Exists   bool     `json:"exists"`
}

// descriptionJSON is a client's description in inspect's --json output.
type descriptionJSON struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	Name string `json:"name"`
}

func decodeInspect(t *testing.T, out string) inspectJSON {
	t.Helper()
	var rep inspectJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect --json output is not JSON: %v\n%s", err, out)
	}
	return rep
}

// queueRow is one row of inspect's queue table.
type queueRow struct {
	pos           int
	client, owner string
	deadline, in  string
	markedDead    bool
}

// parseInspectText reads the holder line and the queue rows of inspect's
// table output.
func parseInspectText(t *testing.T, out string) (holder string, rows []queueRow) {
	t.Helper()
	inQueue := false
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "holder":
			holder = strings.Join(f[1:], " ")
		case len(f) > 0 && f[0] == "#":
			inQueue = true
		case inQueue && len(f) >= 5:
			pos, err := strconv.Atoi(f[0])
			if err != nil {
				inQueue = false
				continue
			}
			rows = append(rows, queueRow{pos: pos, client: f[1], owner: f[2], deadline: f[3], in: f[4], markedDead: len(f) > 5 && f[5] == "dead?"})
		}
	}
	return holder, rows
}

// A lock held by one fairlock owner (re-entered) with two live waiters.
func TestInspect_FairlockLock(t *testing.T) {
	checkNoLeaks(t)
	forEachServer(t, func(t *testing.T, s testServer) {
		c := lockClient(t, s.addr)
		holder := mustMutex(t, c, "orders")
		ctx := context.Background()
		h, err := holder.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Lock(ctx); err != nil { // re-enter: hold count 2
			t.Fatal(err)
		}
		// Two waiters, queued one after the other.
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		var waiters []*lock.Mutex
		for i := range 2 {
			m := mustMutex(t, c, "orders")
			waiters = append(waiters, m)
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = m.Lock(wctx) // ends when the test cancels wctx
			}()
			redistest.Eventually(t, 10*time.Second, fmt.Sprintf("waiter %d to queue", i+1), func() bool {
				st, err := holder.Inspect(ctx, 0)
				return err == nil && st.QueueLength == i+1
			})
		}

		r := runCLI(t, nil, "inspect", "orders", "--addr", s.addr, "--json")
		if r.code != exitOK {
			t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
		}
		rep := decodeInspect(t, r.stdout)
		if rep.Name != "orders" || rep.Key != "orders" || !rep.Locked || rep.Token != h.Token() || rep.ServerTime.IsZero() {
			t.Errorf("report %+v; want orders locked with token %d", rep, h.Token())
		}
		if len(rep.Holders) != 1 || rep.Holders[0].Owner != holder.Owner() || rep.Holders[0].ClientID != c.ID() ||
			!strings.HasSuffix(holder.Owner(), fmt.Sprintf(":%d", rep.Holders[0].OwnerID)) || rep.Holders[0].Count != 2 {
			t.Errorf("holders %+v; want %s with count 2", rep.Holders, holder.Owner())
		}
		if rep.LeaseLeft <= 0 || rep.LeaseLeft > float64((30*time.Second).Milliseconds()) {
			t.Errorf("lease left %vms", rep.LeaseLeft)
		}
		if rep.QueueLength != 2 || len(rep.Queue) != 2 || len(rep.Warnings) != 0 {
			t.Fatalf("queue %d %+v, warnings %q; want 2 live waiters, no warnings", rep.QueueLength, rep.Queue, rep.Warnings)
		}
		for i, q := range rep.Queue {
			if q.Position != i+1 || q.Owner != waiters[i].Owner() || !strings.HasSuffix(waiters[i].Owner(), fmt.Sprintf(":%d", q.OwnerID)) ||
				q.Deadline == nil || q.DeadlineIn <= 0 || q.Dead {
				t.Errorf("queue[%d] = %+v; want %s, live", i, q, waiters[i].Owner())
			}
		}

		// The same through the table.
		r = runCLI(t, nil, "inspect", "--addr", s.addr, "orders")
		if r.code != exitOK {
			t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
		}
		line, rows := parseInspectText(t, r.stdout)
		if want := fmt.Sprintf("client %s owner %d hold count 2", c.ID(), ownerIDOf(holder.Owner())); line != want {
			t.Errorf("holder line %q, want %q\n%s", line, want, r.stdout)
		}
		if len(rows) != 2 {
			t.Fatalf("queue rows %+v\n%s", rows, r.stdout)
		}
		for i, row := range rows {
			if row.pos != i+1 || row.client != c.ID() || row.owner != fmt.Sprint(ownerIDOf(waiters[i].Owner())) || row.markedDead {
				t.Errorf("row %d = %+v", i, row)
			}
		}
		if !strings.Contains(r.stdout, fmt.Sprintf("fencing token  %d", h.Token())) || strings.Contains(r.stdout, "warning") {
			t.Errorf("output:\n%s", r.stdout)
		}
	})
}

// A lock in the shape Redisson leaves it: owner fields "<uuid>:<threadId>",
// Redisson's 5-minute waiter deadlines, no fencing token, plus a waiter
// whose deadline has passed and one with none.
func TestInspect_RedissonLockAndDeadWaiters(t *testing.T) {
	checkNoLeaks(t)
	const holder, other = redissonHolder, redissonOther
	forEachServer(t, func(t *testing.T, s testServer) {
		seedRedissonLock(t, s.addr)

		r := runCLI(t, nil, "inspect", "invoices", "--addr", s.addr, "--json", "--backend", "valkey")
		if r.code != exitOK {
			t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
		}
		rep := decodeInspect(t, r.stdout)
		if len(rep.Holders) != 1 || rep.Holders[0].ClientID != holder || rep.Holders[0].OwnerID != 1 || rep.Holders[0].Count != 2 || rep.Token != 0 {
			t.Errorf("holders %+v token %d; want %s:1 with count 2, no token", rep.Holders, rep.Token, holder)
		}
		if rep.QueueLength != 3 || len(rep.Queue) != 3 {
			t.Fatalf("queue %+v", rep.Queue)
		}
		wantDead := []bool{false, true, true}
		for i, q := range rep.Queue {
			if q.Dead != wantDead[i] || q.Position != i+1 {
				t.Errorf("queue[%d] = %+v, want dead=%v", i, q, wantDead[i])
			}
		}
		if rep.Queue[0].DeadlineIn < 250_000 || rep.Queue[1].DeadlineIn >= 0 || rep.Queue[2].Deadline != nil {
			t.Errorf("deadlines: %+v", rep.Queue)
		}
		if len(rep.Warnings) != 2 || !strings.Contains(rep.Warnings[0], "#2") || !strings.Contains(rep.Warnings[0], "deadline passed") ||
			!strings.Contains(rep.Warnings[1], "#3") || !strings.Contains(rep.Warnings[1], "no deadline") {
			t.Errorf("warnings %q", rep.Warnings)
		}

		r = runCLI(t, nil, "inspect", "invoices", "--addr", s.addr, "--limit", "2")
		_, rows := parseInspectText(t, r.stdout)
		if r.code != exitOK || len(rows) != 2 || rows[0].markedDead || !rows[1].markedDead || rows[1].client != other || rows[1].owner != "58" {
			t.Errorf("exit %d rows %+v\n%s", r.code, rows, r.stdout)
		}
		for _, want := range []string{"3 waiting (showing the first 2", "none issued", "warning: waiter #2", "hold count 2"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("output lacks %q:\n%s", want, r.stdout)
			}
		}
	})
}

func TestInspect_WatchAndFreeLock(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	r := runCLI(t, nil, "inspect", "nothing", "--addr", s.addr, "--watch", "--count", "3", "--interval", "10ms", "--json")
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d JSON lines, want 3:\n%s", len(lines), r.stdout)
	}
	for _, l := range lines {
		if rep := decodeInspect(t, l); rep.Locked || rep.QueueLength != 0 || rep.LeaseLeft != 0 || len(rep.Holders) != 0 || rep.Exists {
			t.Errorf("a name without keys reported as %+v", rep)
		}
	}
	r = runCLI(t, nil, "inspect", "nothing", "--addr", s.addr, "--watch", "--count", "2", "--interval", "10ms")
	if r.code != exitOK || strings.Count(r.stdout, `lock "nothing"`) != 2 || !strings.Contains(r.stdout, `no keys for "nothing"`) {
		t.Errorf("exit %d, output:\n%s", r.code, r.stdout)
	}
	// A free lock that was used keeps its fencing counter: free, not
	// without keys.
	m := mustMutex(t, lockClient(t, s.addr), "used")
	if _, err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, nil, "inspect", "used", "--addr", s.addr)
	if r.code != exitOK || !strings.Contains(r.stdout, "none (free)") || strings.Contains(r.stdout, "no keys") {
		t.Errorf("used free lock: exit %d, output:\n%s", r.code, r.stdout)
	}
	// A name whose keys would hash to different cluster slots.
	if r = runCLI(t, nil, "inspect", "a{}b", "--addr", s.addr); r.code != exitUsage || !strings.Contains(r.stderr, "invalid lock name") {
		t.Errorf("bad name: exit %d, stderr %q", r.code, r.stderr)
	}
}

// Clients that describe themselves (lock.WithDescription) are shown as
// such, for the holder and each waiter, in the table and in JSON; Redisson
// owners are shown as Redisson clients.
func TestInspect_Descriptions(t *testing.T) {
	checkNoLeaks(t)
	s := startRedis(t)
	host, _ := os.Hostname()
	api := lockClient(t, s.addr, lock.WithDescription("orders-api"))
	worker := lockClient(t, s.addr, lock.WithDescription("billing-worker"))
	plain := lockClient(t, s.addr)
	ctx := context.Background()
	holder := mustMutex(t, api, "described")
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i, c := range []*lock.Client{worker, plain} {
		m := mustMutex(t, c, "described")
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = m.Lock(wctx)
		}()
		redistest.Eventually(t, 10*time.Second, "the waiter to queue", func() bool {
			st, err := holder.Inspect(ctx, 0)
			return err == nil && st.QueueLength == i+1
		})
	}
	// A Redisson waiter behind them: Redisson's 5-minute deadline, no
	// fairlock liveness deadline.
	rc := rawClient(t, s.addr)
	redisson := "9f3c2a1e-5b7d-4e8f-a0b1-c2d3e4f5a6b7:57"
	st, err := holder.Inspect(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{
		// Its deadline first: a heartbeat would drop a tail queued without one.
		{"ZADD", "redisson_lock_timeout:{described}", fmt.Sprint(st.ServerTime.Add(5 * time.Minute).UnixMilli()), redisson},
		{"RPUSH", "redisson_lock_queue:{described}", redisson},
	} {
		if err := rc.Do(ctx, rc.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}

	r := runCLI(t, nil, "inspect", "described", "--addr", s.addr, "--json")
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	}
	rep := decodeInspect(t, r.stdout)
	want := func(name string) *descriptionJSON { return &descriptionJSON{Host: host, PID: os.Getpid(), Name: name} }
	if len(rep.Holders) != 1 || !reflect.DeepEqual(rep.Holders[0].Description, want("orders-api")) || rep.Holders[0].Kind != "fairlock" {
		t.Errorf("holders %+v; want orders-api on %s, pid %d", rep.Holders, host, os.Getpid())
	}
	if len(rep.Queue) != 3 {
		t.Fatalf("queue %+v", rep.Queue)
	}
	if q := rep.Queue[0]; !reflect.DeepEqual(q.Description, want("billing-worker")) || q.Kind != "fairlock" {
		t.Errorf("waiter 1: %+v, %q; want billing-worker", q.Description, q.Kind)
	}
	if q := rep.Queue[1]; q.Description != nil || q.Kind != "fairlock" {
		t.Errorf("waiter 2 (no description): %+v, %q", q.Description, q.Kind)
	}
	if q := rep.Queue[2]; q.Description != nil || q.Kind != "redisson" {
		t.Errorf("waiter 3 (Redisson): %+v, %q", q.Description, q.Kind)
	}

	r = runCLI(t, nil, "inspect", "described", "--addr", s.addr)
	for _, want := range []string{
		fmt.Sprintf("held by        orders-api (host %s, pid %d)", host, os.Getpid()),
		fmt.Sprintf("billing-worker (host %s, pid %d)", host, os.Getpid()),
		"fairlock client, no description",
		"Redisson client",
		"WHO",
	} {
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Errorf("exit %d, output lacks %q:\n%s", r.code, want, r.stdout)
		}
	}
	// The queue rows still read as before.
	if _, rows := parseInspectText(t, r.stdout); len(rows) != 3 || rows[0].markedDead || rows[2].client != "9f3c2a1e-5b7d-4e8f-a0b1-c2d3e4f5a6b7" {
		t.Errorf("rows %+v", rows)
	}
}

// ownerIDOf returns the owner ID of an owner field "<clientID>:<ownerID>".
func ownerIDOf(owner string) int64 {
	_, id, _ := inspect.ParseOwner(owner)
	return id
}

// The owners seedRedissonLock writes.
const (
	redissonHolder = "9f3c2a1e-5b7d-4e8f-a0b1-c2d3e4f5a6b7"
	redissonOther  = "1d2e3f40-aaaa-4bbb-8ccc-0123456789ab"
)

// seedRedissonLock writes lock "invoices" as Redisson would leave it:
// held twice by redissonHolder:1, with a live waiter, one whose deadline
// passed 1.5 s ago and one with none (deadlines first: a heartbeat would
// drop a tail queued without one).
func seedRedissonLock(t *testing.T, addr string) {
	t.Helper()
	rc := rawClient(t, addr)
	ctx := context.Background()
	tm, err := rc.Do(ctx, rc.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	now := sec * 1000
	for _, cmd := range [][]string{
		{"HSET", "invoices", redissonHolder + ":1", "2"},
		{"PEXPIRE", "invoices", "30000"},
		{"ZADD", "redisson_lock_timeout:{invoices}", fmt.Sprint(now + 300_000), redissonHolder + ":57", fmt.Sprint(now - 1500), redissonOther + ":58"},
		{"RPUSH", "redisson_lock_queue:{invoices}", redissonHolder + ":57", redissonOther + ":58", redissonOther + ":59"},
	} {
		if err := rc.Do(ctx, rc.B().Arbitrary(cmd...).Build()).Error(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
}
