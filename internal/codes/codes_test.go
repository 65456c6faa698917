package codes_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/codes"
	"github.com/taskling-go/taskling/internal/devtools/pgtest"
)

// TestCodesAgreeWithTheSchema: every Go code is what the schema's naming function gives its name,
// and a name the Go side does not know is an error in SQL too.
func TestCodesAgreeWithTheSchema(t *testing.T) {
	t.Parallel()
	pool, _ := pgtest.NewDB(t)
	ctx := context.Background()
	n := 0
	for fn, names := range codes.Names {
		for name, want := range names {
			var got int16
			require.NoError(t, pool.QueryRow(ctx, fmt.Sprintf(`SELECT taskling.%s($1)`, fn), name).Scan(&got), "%s(%q)", fn, name)
			require.Equal(t, want, got, "%s(%q)", fn, name)
			require.Equal(t, name, codes.Name(fn, want))
			n++
		}
		_, err := pool.Exec(ctx, fmt.Sprintf(`SELECT taskling.%s('no such name')`, fn))
		require.ErrorContains(t, err, "has no value named", fn)
	}
	require.Equal(t, 33, n, "names checked")
}
