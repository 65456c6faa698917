package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// TestKeysOverriddenThroughTheAPI: PUT and DELETE of a key's override (the empty key too, at
// keys?key=), key_limit among the overrides, each answered with the task and its keys; bad input names
// the field.
func TestKeysOverriddenThroughTheAPI(t *testing.T) {
	t.Parallel()
	s := fast
	s.ConcurrencyLimit, s.KeyLimit = 4, 1
	b := setupWith(t, s, nil)
	e, err := b.client.StartExecution(b.ctx, "app", "export", &taskling.StartOptions{Key: "acme", Cost: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Complete(b.ctx) })

	status, body := b.do(t, "PUT", "/api/v1/tasks/app/export/keys/acme", token, `{"limit": 3, "by": "OPS-1"}`)
	require.Equal(t, http.StatusOK, status, body)
	var task httpapi.TaskDetail
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Equal(t, 1, task.KeysTotal)
	require.Equal(t, httpapi.Key{Key: "acme", Holders: 1, CostInUse: 1, Limit: ptr(3), LimitSource: "override",
		RateSource: "none", NextAllowed: "0s"}, task.Keys[0])
	require.Equal(t, "declared", task.KeyLimitSource)
	require.Equal(t, 1, *task.KeyLimit)

	status, body = b.do(t, "PUT", "/api/v1/tasks/app/export/keys?key=", token, `{"limit": 2}`)
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Equal(t, 2, task.KeysTotal, "the empty key is named too")

	status, body = b.do(t, "PATCH", "/api/v1/tasks/app/export/overrides", token, `{"key_limit": 0}`)
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	require.Nil(t, task.KeyLimit, "0: no key limit")
	require.Equal(t, "override", task.KeyLimitSource)

	status, body = b.do(t, "DELETE", "/api/v1/tasks/app/export/keys/acme", token, "")
	require.Equal(t, http.StatusOK, status, body)
	require.NoError(t, json.Unmarshal([]byte(body), &task))
	for _, k := range task.Keys {
		if k.Key == "acme" {
			require.Equal(t, "override_key_limit", k.LimitSource)
		}
	}

	for _, c := range []struct{ method, path, body, field string }{
		{"PUT", "/api/v1/tasks/app/export/keys/acme", `{"limit": 0}`, "limit"},
		{"PUT", "/api/v1/tasks/app/export/keys/acme", `{}`, "limit"},
		{"PUT", "/api/v1/tasks/app/export/keys/acme", `{"limit": 2, "weight": 3}`, "weight"},
		{"PATCH", "/api/v1/tasks/app/export/overrides", `{"key_limit": -1}`, "key_limit"},
		{"PUT", "/api/v1/tasks/app/export/keys/a%E2%80%AEb", `{"limit": 2}`, "key"},
	} {
		status, body := b.do(t, c.method, c.path, token, c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %s %s: %s", c.method, c.path, c.body, body)
		field, _ := apiErr(t, body)
		require.Equal(t, c.field, field, body)
	}
}

func ptr[T any](v T) *T { return &v }

// TestTaskPageShowsTheKeysAndAKeyForm: the dashboard's task page gives the key limit in force,
// the keys with their holders, cost in use, waiters, limits and sources, each execution's key and
// cost, and (to an operator) the form that overrides a key's limit.
func TestTaskPageShowsTheKeysAndAKeyForm(t *testing.T) {
	t.Parallel()
	s := fast
	s.ConcurrencyLimit, s.KeyLimit = 4, 2
	b := setupWith(t, s, nil)
	e, err := b.client.StartExecution(b.ctx, "app", "export", &taskling.StartOptions{Key: "acme", Cost: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Complete(b.ctx) })
	status, page := b.do(t, "GET", "/tasks/app/export", token, "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, `id="key-limit">2 (declared); 0 keys with starts waiting for a slot`)
	require.Contains(t, page, `<tr class="key-row" data-key="acme">`)
	require.Contains(t, page, "<td class=\"mono key\">acme</td>\n  <td class=\"cost\">2</td>", "the execution's key and cost, each in its column")
	require.Contains(t, page, `id="key-form"`)
	_, public := b.do(t, "GET", "/tasks/app/export", "", "")
	require.NotContains(t, public, `id="key-form"`, "no form for a reader")
}
