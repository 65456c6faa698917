package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// Issue 22 item 7: before the fix each of these answered 200, and every start failed after it.
func TestOverridesThatTheDeclaredSettingsDoNotFitAre400(t *testing.T) {
	t.Parallel()
	b := setupWith(t, taskling.TaskSettings{}, nil) // the host declares the defaults: a 5 s interval
	require.NoError(t, b.start(t, "export").Complete(b.ctx))
	for _, tc := range []struct {
		body, field, message string
	}{
		{`{"keep_alive_death_threshold": "300ms"}`, "keep_alive_death_threshold",
			"KeepAliveDeathThreshold (300ms, operator override) must be at least twice KeepAliveInterval (5s, declared by test-host)"},
		{`{"death_mode": "override"}`, "death_mode", "DeathModeOverride (operator override) needs one above zero"},
		{`{"keep_alive_interval": "1000000h"}`, "keep_alive_interval", "want at most 1h0m0s"},
		{`{"keep_alive_death_threshold": "25h"}`, "keep_alive_death_threshold", "want at most 24h0m0s"},
		{`{"override_threshold": "48h"}`, "override_threshold", "want at most 24h0m0s"},
	} {
		status, body := b.do(t, "PATCH", "/api/v1/tasks/app/export/overrides", token, tc.body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", tc.body, body)
		field, message := apiErr(t, body)
		require.Equal(t, tc.field, field, "%s: %s", tc.body, body)
		require.Contains(t, message, tc.message, tc.body)
	}
	var task httpapi.TaskDetail
	b.getJSON(t, "/api/v1/tasks/app/export", &task)
	require.Nil(t, task.Overrides.UpdatedAt, "nothing was stored")
	require.True(t, task.EnabledNow)
	require.Equal(t, "declared", task.EnabledSource)
	require.Nil(t, task.SettingsError)

	status, body := b.do(t, "PATCH", "/api/v1/tasks/app/export/overrides", token, `{"death_mode": "override", "override_threshold": "30s"}`)
	require.Equal(t, http.StatusOK, status, body)
	b.start(t, "export")
}
