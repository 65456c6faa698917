package taskling_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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

// TestAPISessionsKeepAtMostTheCapPerPrincipal is issue 40 item 9: a start past
// MaxAPISessionsPerPrincipal ends the principal's oldest live sessions, also when many start at
// once.
func TestAPISessionsKeepAtMostTheCapPerPrincipal(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s := b.client.APISessions()
	const n = 3 * taskling.MaxAPISessionsPerPrincipal
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id, err := s.Start(b.ctx, "alice", "c1", time.Hour)
			assert.NoError(t, err)
			ids[i] = id
		})
	}
	wg.Wait()
	require.Equal(t, taskling.MaxAPISessionsPerPrincipal, b.count(t, `SELECT count(*) FROM taskling.api_session WHERE principal = 'alice'`))
	bob, err := s.Start(b.ctx, "bob", "c2", time.Hour)
	require.NoError(t, err)

	// One more start of alice ends her oldest; bob's stays.
	var oldest string
	for _, id := range ids {
		if _, err := s.Get(b.ctx, id); err == nil {
			oldest = id
			break
		}
	}
	b.exec(t, `UPDATE taskling.api_session SET created_at = now() - interval '1 hour' WHERE id_sha256 = sha256($1::bytea)`, []byte(oldest))
	_, err = s.Start(b.ctx, "alice", "c1", time.Hour)
	require.NoError(t, err)
	_, err = s.Get(b.ctx, oldest)
	require.ErrorIs(t, err, taskling.ErrNotFound, "the oldest ended")
	require.Equal(t, taskling.MaxAPISessionsPerPrincipal, b.count(t, `SELECT count(*) FROM taskling.api_session WHERE principal = 'alice'`))
	_, err = s.Get(b.ctx, bob)
	require.NoError(t, err)
}
