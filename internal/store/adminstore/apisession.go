package adminstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskling-go/taskling/tasklingtype"
)

// Sign-in sessions of the HTTP API (taskling.api_session), known by the SHA-256 of their id.

// apiSessionLockClass is the first key of the advisory lock that serializes the sign-ins of a
// principal (the second is the hash of its name), so that concurrent ones keep its cap: "tkas".
const apiSessionLockClass = 0x746b6173

// StartAPISession stores a session of principal for ttl and ends the principal's oldest live
// sessions past keep (the new one included), and deletes the expired ones (by the expiry index).
// The database clock dates it.
func (s *Store) StartAPISession(ctx context.Context, idSHA256 []byte, principal, credential string, ttl time.Duration, keep int) error {
	if keep < 1 {
		return fmt.Errorf("start a session of %s: keep is %d; want at least 1", principal, keep)
	}
	b := &pgx.Batch{}
	// One implicit transaction; the lock in a statement of its own, since a statement's snapshot
	// is taken before it waits.
	b.Queue(`SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(apiSessionLockClass), principal)
	b.Queue(`DELETE FROM taskling.api_session WHERE expires_at <= now()`)
	// clock_timestamp: after the lock, so that created_at orders the principal's sign-ins.
	b.Queue(`INSERT INTO taskling.api_session (id_sha256, principal, credential, created_at, expires_at)
VALUES ($1, $2, $3, clock_timestamp(), now() + $4::interval)`, idSHA256, principal, credential, ttl)
	// By the principal index: a principal has at most keep sessions to sort.
	b.Queue(`DELETE FROM taskling.api_session WHERE id_sha256 IN (
    SELECT id_sha256 FROM taskling.api_session
    WHERE principal = $1 AND id_sha256 <> $2
    ORDER BY created_at DESC, id_sha256 DESC
    OFFSET $3)`, principal, idSHA256, keep-1)
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("start a session of %s: %w", principal, err)
	}
	return nil
}

// APISession returns the session whose id hashes to idSHA256, if it has not expired.
func (s *Store) APISession(ctx context.Context, idSHA256 []byte) (tasklingtype.APISession, bool, error) {
	var a tasklingtype.APISession
	err := s.db.QueryRow(ctx, `SELECT principal, credential, created_at, expires_at FROM taskling.api_session
WHERE id_sha256 = $1 AND expires_at > now()`, idSHA256).Scan(&a.Principal, &a.Credential, &a.CreatedAt, &a.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, false, nil
	}
	if err != nil {
		return a, false, fmt.Errorf("read a session: %w", err)
	}
	return a, true, nil
}

// EndAPISession deletes the session whose id hashes to idSHA256.
func (s *Store) EndAPISession(ctx context.Context, idSHA256 []byte) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM taskling.api_session WHERE id_sha256 = $1`, idSHA256); err != nil {
		return fmt.Errorf("end a session: %w", err)
	}
	return nil
}

// EndAPISessionsOf deletes every session of the principals and returns how many there were.
func (s *Store) EndAPISessionsOf(ctx context.Context, principals []string) (int64, error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM taskling.api_session WHERE principal = ANY($1)`, principals)
	if err != nil {
		return 0, fmt.Errorf("end the sessions of %v: %w", principals, err)
	}
	return tag.RowsAffected(), nil
}
