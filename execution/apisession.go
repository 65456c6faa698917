package execution

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sign-in sessions of the HTTP API (taskling.api_session), known by the SHA-256 of their id.

// APISession is a stored sign-in session.
type APISession struct {
	Principal  string    `db:"principal"`
	Credential string    `db:"credential"`
	CreatedAt  time.Time `db:"created_at"`
	ExpiresAt  time.Time `db:"expires_at"`
}

// StartAPISession stores a session of principal for ttl, and deletes the expired ones (by the
// expiry index). The database clock dates it.
func (s *Store) StartAPISession(ctx context.Context, idSHA256 []byte, principal, credential string, ttl time.Duration) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM taskling.api_session WHERE expires_at <= now()`)
	b.Queue(`INSERT INTO taskling.api_session (id_sha256, principal, credential, expires_at)
VALUES ($1, $2, $3, now() + $4::interval)`, idSHA256, principal, credential, ttl)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("execution: start a session of %s: %w", principal, err)
	}
	return nil
}

// APISession returns the session whose id hashes to idSHA256, if it has not expired.
func (s *Store) APISession(ctx context.Context, idSHA256 []byte) (APISession, bool, error) {
	var a APISession
	err := s.pool.QueryRow(ctx, `SELECT principal, credential, created_at, expires_at FROM taskling.api_session
WHERE id_sha256 = $1 AND expires_at > now()`, idSHA256).Scan(&a.Principal, &a.Credential, &a.CreatedAt, &a.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, false, nil
	}
	if err != nil {
		return a, false, fmt.Errorf("execution: read a session: %w", err)
	}
	return a, true, nil
}

// EndAPISession deletes the session whose id hashes to idSHA256.
func (s *Store) EndAPISession(ctx context.Context, idSHA256 []byte) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM taskling.api_session WHERE id_sha256 = $1`, idSHA256); err != nil {
		return fmt.Errorf("execution: end a session: %w", err)
	}
	return nil
}

// EndAPISessionsOf deletes every session of the principals and returns how many there were.
func (s *Store) EndAPISessionsOf(ctx context.Context, principals []string) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM taskling.api_session WHERE principal = ANY($1)`, principals)
	if err != nil {
		return 0, fmt.Errorf("execution: end the sessions of %v: %w", principals, err)
	}
	return tag.RowsAffected(), nil
}
