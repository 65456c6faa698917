package settingsfile_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/taskling/settingsfile"
)

// Issue 22 item 7: before the fix a file could set an interval of 1 000 000 h, or a threshold of
// days, and every start obeyed it.
func TestAFileWithADurationAboveItsBoundIsRefused(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"[defaults]\nkeep_alive_interval = \"1000000h\"\n", "KeepAliveInterval (settings) is 1000000h0m0s; want at most 1h0m0s"},
		{"[applications.a]\nkeep_alive_death_threshold = \"25h\"\n", "KeepAliveDeathThreshold (settings) is 25h0m0s; want at most 24h0m0s"},
		{"[applications.a.tasks.b]\ndeath_mode = \"override\"\noverride_threshold = \"48h\"\n", "OverrideThreshold (settings) is 48h0m0s; want at most 24h0m0s"},
	} {
		path := filepath.Join(t.TempDir(), "taskling.toml")
		write(t, path, tc.text)
		_, err := settingsfile.Open(context.Background(), path, nil)
		require.ErrorIs(t, err, settingsfile.ErrMalformed, tc.text)
		require.ErrorContains(t, err, tc.want)
	}
}
