package taskling

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"time"
)

// APISessions are the sign-in sessions of the HTTP API and dashboard (package dashboard), kept
// in the database so that every server of a fleet knows them: a browser signs in on one replica
// and is known by all; signing out on one ends the session on all. The id a session is known by
// is stored only as its SHA-256. Package dashboard uses them; most programs never need to.
type APISessions struct{ c *Client }

// APISessions returns the client's sign-in sessions.
func (c *Client) APISessions() APISessions { return APISessions{c: c} }

// MaxAPISessionsPerPrincipal is how many live sessions a principal keeps: a sign-in past it ends
// the principal's oldest session (a browser that signs in again adds a session, and the table
// stays bounded).
const MaxAPISessionsPerPrincipal = 20

// Start stores a new session of principal lasting ttl (on the database clock), and returns its
// id: 32 random bytes, base64url, for a cookie. The principal's oldest live sessions past
// MaxAPISessionsPerPrincipal end, concurrent starts included; expired sessions are deleted
// meanwhile.
func (s APISessions) Start(ctx context.Context, principal, credential string, ttl time.Duration) (string, error) {
	if err := validateName("principal", principal); err != nil {
		return "", err
	}
	if ttl <= 0 {
		return "", fmt.Errorf("%w: session lifetime is %s; want more than zero", ErrInvalidArgument, ttl)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	id := base64.RawURLEncoding.EncodeToString(b)
	if err := s.c.admin.StartAPISession(ctx, sessionHash(id), principal, credential, ttl, MaxAPISessionsPerPrincipal); err != nil {
		return "", err
	}
	return id, nil
}

// Get returns the session known by id. The error wraps ErrNotFound when there is none: never
// started, ended, or expired.
func (s APISessions) Get(ctx context.Context, id string) (APISession, error) {
	a, ok, err := s.c.admin.APISession(ctx, sessionHash(id))
	if err != nil {
		return APISession{}, err
	}
	if !ok {
		return APISession{}, notFound("session")
	}
	return a, nil
}

// End ends the session known by id (signing out). Ending an unknown session does nothing.
func (s APISessions) End(ctx context.Context, id string) error {
	return s.c.admin.EndAPISession(ctx, sessionHash(id))
}

// EndAll ends every session of the principals (their token was removed or replaced) and returns
// how many there were.
func (s APISessions) EndAll(ctx context.Context, principals ...string) (int64, error) {
	if len(principals) == 0 {
		return 0, nil
	}
	return s.c.admin.EndAPISessionsOf(ctx, principals)
}

func sessionHash(id string) []byte {
	sum := sha256.Sum256([]byte(id))
	return sum[:]
}
