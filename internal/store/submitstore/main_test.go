package submitstore_test

import (
	"testing"

	"github.com/taskling-go/taskling/internal/devtools/testutil"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }
