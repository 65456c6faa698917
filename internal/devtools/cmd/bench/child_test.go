package main

import (
	"context"
	"strings"
	"testing"

	"github.com/taskling-go/taskling/internal/devtools/testutil"
)

// TestChildrenGetTheDatabaseInTheirEnvironment is issue 40: the children of the multi-process
// scenarios got the database URL, password and all, on their command lines, which anyone on the
// machine can read (ps). It goes in their environment.
func TestChildrenGetTheDatabaseInTheirEnvironment(t *testing.T) {
	t.Parallel()
	const dbURL = "postgres://postgres:s3cret@127.0.0.1:5432/test_x?sslmode=disable"
	cmd := childCommand(context.Background(), "/bin/bench", dbURL, "-child", "cycles", "-goroutines", "4")
	testutil.RequireNoDatabaseURL(t, dbURL, []string{strings.Join(cmd.Args, " ")})
	if got := cmd.Env[len(cmd.Env)-1]; got != childDatabaseEnv+"="+dbURL { // the last value of a name wins
		t.Errorf("the child's environment ends with %q; want its database", got)
	}
}
