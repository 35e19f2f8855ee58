// Package fencing shows fencing tokens end to end: a fairlock lock guards
// a row in PostgreSQL, and the row keeps the token of the write that last
// changed it. A write carrying an older token changes nothing, so a holder
// that lost the lock without knowing it (a long GC pause, a suspended VM)
// cannot overwrite the work of the holder that came after it: the
// database itself refuses the late write.
//
// The lock alone cannot give that guarantee. A lease ends on the server's
// clock whether or not its holder is running; a holder that stalls past
// its lease wakes up believing it still holds the lock, and nothing in
// the lock can stop its next write. The storage can, if every write
// carries the hold's token (lock.Hold.Token): tokens only grow, so the
// storage keeps the newest it has seen and turns older ones away.
//
// The test (fencing_test.go) runs that scenario against a real
// PostgreSQL and a real redis-server.
package fencing

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what Store needs from PostgreSQL: *pgx.Conn, *pgxpool.Pool and
// pgx.Tx all have it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNoRow is returned by Read for a row that was never inserted.
var ErrNoRow = errors.New("fencing: no such row")

// Store keeps values in the table fenced_values, one row an id, each row
// with the fencing token of the write that last changed it.
type Store struct{ db DB }

// NewStore returns a Store that works through db.
func NewStore(db DB) *Store { return &Store{db: db} }

// CreateTable creates the table if it does not exist yet.
func (s *Store) CreateTable(ctx context.Context) error {
	_, err := s.db.Exec(ctx, `CREATE TABLE IF NOT EXISTS fenced_values (
		id    bigint PRIMARY KEY,
		value text   NOT NULL,
		token bigint NOT NULL
	)`)
	if err != nil {
		return fmt.Errorf("fencing: create table: %w", err)
	}
	return nil
}

// Insert adds row id with value and token 0, below every fencing token,
// so that the first write under the lock applies. An existing row is left
// as it is.
func (s *Store) Insert(ctx context.Context, id int64, value string) error {
	_, err := s.db.Exec(ctx,
		`INSERT INTO fenced_values (id, value, token) VALUES ($1, $2, 0) ON CONFLICT (id) DO NOTHING`,
		id, value)
	if err != nil {
		return fmt.Errorf("fencing: insert row %d: %w", id, err)
	}
	return nil
}

// Write sets row id to value if token is newer than the token of the
// row's last write, and records token. It returns the number of rows it
// changed: 1, or 0 when a write with the same or a newer token came
// first (or the row does not exist). The check and the write are one
// statement, so no other write can come between them.
func (s *Store) Write(ctx context.Context, id int64, value string, token int64) (int64, error) {
	tag, err := s.db.Exec(ctx,
		`UPDATE fenced_values SET value = $1, token = $2 WHERE id = $3 AND token < $2`,
		value, token, id)
	if err != nil {
		return 0, fmt.Errorf("fencing: write row %d with token %d: %w", id, token, err)
	}
	return tag.RowsAffected(), nil
}

// Read returns row id's value and the token of its last write (0: none
// since Insert). It returns ErrNoRow for a row that does not exist.
func (s *Store) Read(ctx context.Context, id int64) (value string, token int64, err error) {
	err = s.db.QueryRow(ctx, `SELECT value, token FROM fenced_values WHERE id = $1`, id).Scan(&value, &token)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, fmt.Errorf("%w: %d", ErrNoRow, id)
	}
	if err != nil {
		return "", 0, fmt.Errorf("fencing: read row %d: %w", id, err)
	}
	return value, token, nil
}
