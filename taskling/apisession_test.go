package taskling_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling"
)

// TestAPISessionsStartEndAndExpire: a session is known by its random id until it ends, expires
// or its principal's sessions all end.
func TestAPISessionsStartEndAndExpire(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s := b.client.APISessions()
	one, err := s.Start(b.ctx, "alice", "c1", time.Hour)
	require.NoError(t, err)
	two, err := s.Start(b.ctx, "alice", "c1", time.Hour)
	require.NoError(t, err)
	bob, err := s.Start(b.ctx, "bob", "c2", time.Hour)
	require.NoError(t, err)
	require.NotEqual(t, one, two)
	got, err := s.Get(b.ctx, one)
	require.NoError(t, err)
	require.Equal(t, "alice", got.Principal)
	require.Equal(t, "c1", got.Credential)
	require.WithinDuration(t, got.CreatedAt.Add(time.Hour), got.ExpiresAt, time.Second)

	require.NoError(t, s.End(b.ctx, one))
	_, err = s.Get(b.ctx, one)
	require.ErrorIs(t, err, taskling.ErrNotFound)
	n, err := s.EndAll(b.ctx, "alice", "carol")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, err = s.Get(b.ctx, two)
	require.ErrorIs(t, err, taskling.ErrNotFound)
	b.exec(t, `UPDATE taskling.api_session SET expires_at = now()`)
	_, err = s.Get(b.ctx, bob)
	require.ErrorIs(t, err, taskling.ErrNotFound, "expired")
	_, err = s.Get(b.ctx, "never started")
	require.ErrorIs(t, err, taskling.ErrNotFound)

	_, err = s.Start(b.ctx, "", "c", time.Hour)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	_, err = s.Start(b.ctx, "alice", "c", 0)
	require.ErrorIs(t, err, taskling.ErrInvalidArgument)
	_, err = s.Start(b.ctx, "alice", "c", time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM taskling.api_session`), "the expired ones are deleted by a start")
}
