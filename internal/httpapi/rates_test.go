package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
)

// TestRatesOverriddenThroughTheAPI: rate and key_rate among the overrides ("none" overrides to no
// rate), a key's rate through its PUT (with or without a limit), each answered with the task, its
// rates, their sources and next_allowed; DELETE clears them; bad input names the field.
func TestRatesOverriddenThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setupWith(t, fast, nil)
	var task httpapi.TaskDetail
	patch := func(method, path, body string) {
		t.Helper()
		status, answer := b.do(t, method, path, token, body)
		require.Equal(t, http.StatusOK, status, answer)
		task = httpapi.TaskDetail{}
		require.NoError(t, json.Unmarshal([]byte(answer), &task))
	}
	patch("PATCH", "/api/v1/tasks/app/export/overrides", `{"rate": "30/1m", "key_rate": "10/1m,burst=2", "by": "OPS-1"}`)
	require.Equal(t, "30/1m", *task.Rate)
	require.Equal(t, "override", task.RateSource)
	require.Equal(t, "10/1m,burst=2", *task.KeyRate)
	require.Equal(t, "override", task.KeyRateSource)
	require.Equal(t, "30/1m", *task.Overrides.Rate)
	require.Equal(t, "0s", task.NextAllowed)

	patch("PATCH", "/api/v1/tasks/app/export/overrides", `{"rate": "none"}`)
	require.Nil(t, task.Rate, "overridden to none")
	require.Equal(t, "override", task.RateSource)
	require.Equal(t, "none", *task.Overrides.Rate)
	require.Equal(t, "10/1m,burst=2", *task.Overrides.KeyRate, "left as it was")

	patch("PUT", "/api/v1/tasks/app/export/keys/acme", `{"rate": "5/1m"}`)
	require.Equal(t, 1, task.KeysTotal)
	require.Equal(t, httpapi.Key{Key: "acme", LimitSource: "none", Rate: ptr("5/1m"), RateSource: "override", NextAllowed: "0s"}, task.Keys[0])
	patch("PUT", "/api/v1/tasks/app/export/keys/acme", `{"limit": 2, "rate": "none"}`)
	require.Equal(t, httpapi.Key{Key: "acme", Limit: ptr(2), LimitSource: "override", RateSource: "override", NextAllowed: "0s"}, task.Keys[0])

	_, err := b.pool.Exec(b.ctx, `
UPDATE taskling.task_rate SET tat_us = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 60000000, rate = '3/60000000/3'`)
	require.NoError(t, err)
	b.getJSON(t, "/api/v1/tasks/app/export", &task)
	require.Equal(t, "3/1m,burst=3", *task.Rate)
	require.InDelta(t, 20, task.NextAllowedSeconds, 2, "60s − (3−1)·20s: %s", task.NextAllowed)

	patch("DELETE", "/api/v1/tasks/app/export/overrides", "")
	require.Nil(t, task.Rate)
	require.Equal(t, "none", task.RateSource)
	require.Nil(t, task.Overrides.Rate)
	require.Zero(t, task.KeysTotal, "the key's overrides went with the others")

	for _, c := range []struct{ method, path, body, field string }{
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"rate": "fast"}`, "rate"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"rate": ""}`, "rate"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"key_rate": "0/1m"}`, "key_rate"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"rate": 30}`, "rate"},
		{"PUT", "/api/v1/tasks/app/export/keys/acme", `{"rate": "1/1ns"}`, "rate"},
		{"PUT", "/api/v1/tasks/app/export/keys/acme", `{"limit": 2, "rate": "1/1m,burst=x"}`, "rate"},
	} {
		status, body := b.do(t, c.method, c.path, token, c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %s %s: %s", c.method, c.path, c.body, body)
		field, _ := apiErr(t, body)
		require.Equal(t, c.field, field, body)
	}
}

// TestTaskPageShowsTheRatesAndTheRateInputs: the dashboard's task page gives the task's rate and
// key rate with their sources and when the next start is allowed, each key's rate, source and next
// start, and (to an operator) the inputs that override the task's and a key's rate.
func TestTaskPageShowsTheRatesAndTheRateInputs(t *testing.T) {
	t.Parallel()
	b := setupWith(t, fast, nil)
	status, body := b.do(t, "PATCH", "/api/v1/tasks/app/export/overrides", token, `{"rate": "30/1m", "key_rate": "none"}`)
	require.Equal(t, http.StatusOK, status, body)
	status, body = b.do(t, "PUT", "/api/v1/tasks/app/export/keys/acme", token, `{"rate": "5/1m,burst=2"}`)
	require.Equal(t, http.StatusOK, status, body)
	_, err := b.pool.Exec(b.ctx, `
UPDATE taskling.task_rate SET tat_us = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + 30000000`)
	require.NoError(t, err)

	status, page := b.do(t, "GET", "/tasks/app/export", token, "")
	require.Equal(t, http.StatusOK, status)
	require.Regexp(t, `id="rate">30/1m \(override\); next start allowed in (2\d|30)(\.\d+)?s</dd>`, page, "T = 2s: 30s − 0 (less a loaded machine's seconds)")
	require.Contains(t, page, `id="key-rate">none (override)</dd>`)
	require.Regexp(t, `(?s)<tr class="key-row" data-key="acme">.*<td class="key-rate">5/1m,burst=2</td>\s*<td>override</td>\s*<td class="key-next">now</td>`, page)
	require.Contains(t, page, `id="rate-input"`)
	require.Contains(t, page, `id="key-rate-input"`)
	_, public := b.do(t, "GET", "/tasks/app/export", "", "")
	require.NotContains(t, public, `id="rate-input"`, "no input for a reader")
	require.Contains(t, public, `id="rate">30/1m (override)`)
}
