package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"example.com/fencing"
	"example.com/fencing/internal/pgtest"
	"github.com/fairlock/fairlock/lock"
	"github.com/fairlock/fairlock/redistest"
	"github.com/fairlock/fairlock/rueidisbackend"
	"github.com/jackc/pgx/v5"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

const (
	rowID = 1
	// lease is A's fixed lease: short, so that the test does not wait long
	// for it to run out.
	lease = 500 * time.Millisecond
)

// TestMain fails the run if a goroutine outlives the tests: every lock
// client, connection and server must have been closed by then.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lateWrite is what A's write returned.
type lateWrite struct {
	rows int64
	err  error
}

// TestLateWriteIsRefused: holder A stalls past its lease, B takes the lock
// with a newer token and writes; when A wakes and writes with its old
// token, PostgreSQL changes nothing and the row keeps B's value. A and B
// stand for two processes: each has its own lock client and its own
// database connection. Run with -v for the figures.
func TestLateWriteIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pg := pgtest.Start(t)
	storeA := fencing.NewStore(connect(ctx, t, pg.URL()))
	storeB := fencing.NewStore(connect(ctx, t, pg.URL()))
	if err := storeB.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := storeB.Insert(ctx, rowID, "initial"); err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	a := newMutex(t, srv, "row-1")
	b := newMutex(t, srv, "row-1")

	// A takes the lock with a fixed lease: no watchdog renews it.
	holdA, err := a.LockWithLease(ctx, lease)
	if err != nil {
		t.Fatalf("A: LockWithLease: %v", err)
	}
	tokenA := holdA.Token()

	// A stalls before its write, as in a long GC pause: its write waits on
	// resume, and nothing in it looks at holdA.
	resume := make(chan struct{})
	aWrote := make(chan lateWrite, 1)
	go func() {
		select {
		case <-resume:
		case <-ctx.Done():
			aWrote <- lateWrite{err: ctx.Err()}
			return
		}
		rows, err := storeA.Write(ctx, rowID, "written by A", tokenA)
		aWrote <- lateWrite{rows, err}
	}()

	// A's lease runs out while it stalls. Its Hold ends no later than the
	// server's expiry; A would have seen it, had it been running.
	select {
	case <-holdA.Done():
	case <-ctx.Done():
		t.Fatalf("A's hold did not end after its %v lease: %v", lease, ctx.Err())
	}
	if !errors.Is(holdA.Err(), lock.ErrLockLost) {
		t.Fatalf("A's hold ended with %v, want lock.ErrLockLost", holdA.Err())
	}

	// B waits for the lock (granted once the server has expired A's
	// lease) and writes with its newer token.
	holdB, err := b.Lock(ctx)
	if err != nil {
		t.Fatalf("B: Lock: %v", err)
	}
	tokenB := holdB.Token()
	rowsB, err := storeB.Write(ctx, rowID, "written by B", tokenB)
	if err != nil {
		t.Fatalf("B: %v", err)
	}

	// A wakes up and makes its late write, with its old token, while B
	// still holds the lock.
	close(resume)
	late := <-aWrote
	if late.err != nil {
		t.Fatalf("A: %v", late.err)
	}
	value, token, err := storeB.Read(ctx, rowID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("A: token %d, lease %v, hold ended: %v", tokenA, lease, holdA.Err())
	t.Logf("B: token %d, write: %d row affected", tokenB, rowsB)
	t.Logf("A, late: token %d, write: %d rows affected", tokenA, late.rows)
	t.Logf("row %d: value %q, token %d", rowID, value, token)

	if tokenB <= tokenA {
		t.Errorf("B's token %d is not newer than A's %d", tokenB, tokenA)
	}
	if rowsB != 1 {
		t.Errorf("B's write changed %d rows, want 1", rowsB)
	}
	if late.rows != 0 {
		t.Errorf("A's late write changed %d rows, want 0", late.rows)
	}
	if value != "written by B" || token != tokenB {
		t.Errorf("row %d = %q with token %d, want %q with B's token %d", rowID, value, token, "written by B", tokenB)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Errorf("B: Unlock: %v", err)
	}
}

// connect opens a database connection, closed at cleanup.
func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// newMutex returns a Mutex on its own lock client (rueidis backend) on
// srv, closed at cleanup: one process's handle on the lock.
func newMutex(t *testing.T, srv *redistest.Server, name string) *lock.Mutex {
	t.Helper()
	be, err := rueidisbackend.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	if err != nil {
		t.Fatalf("rueidisbackend.Dial: %v", err)
	}
	locks, err := lock.NewClient(be) // locks.Close closes be, and be its client
	if err != nil {
		be.Close()
		t.Fatalf("lock.NewClient: %v", err)
	}
	t.Cleanup(func() { locks.Close() })
	m, err := locks.NewMutex(name)
	if err != nil {
		t.Fatalf("NewMutex: %v", err)
	}
	return m
}
