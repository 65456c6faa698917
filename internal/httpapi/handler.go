// Package httpapi is taskling's HTTP handler: a JSON API under /api/v1/, the web dashboard at
// /, and Prometheus metrics at /metrics. Users mount it through the public package dashboard;
// `taskling serve` serves it.
package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingprom"
)

// Options configure the handler; the fields are documented on dashboard.Options, the public
// face of this package.
type Options struct {
	Token           string
	ProtectReads    bool
	Logger          *zap.Logger
	RefreshInterval time.Duration
}

// Handler serves the API, the dashboard and the metrics of one taskling client.
type Handler struct {
	client  *taskling.Client
	opts    Options
	log     *zap.Logger
	mux     *http.ServeMux
	metrics http.Handler
	pages   *pages
}

// New returns the handler for client.
func New(client *taskling.Client, opts *Options) (*Handler, error) {
	if client == nil {
		return nil, fmt.Errorf("httpapi: client is nil")
	}
	h := &Handler{client: client}
	if opts != nil {
		h.opts = *opts
	}
	if h.opts.ProtectReads && h.opts.Token == "" {
		return nil, fmt.Errorf("httpapi: Options.ProtectReads needs Options.Token")
	}
	if h.opts.RefreshInterval <= 0 {
		h.opts.RefreshInterval = 2 * time.Second
	}
	h.log = h.opts.Logger
	if h.log == nil {
		h.log = zap.NewNop()
	}
	var err error
	if h.pages, err = newPages(); err != nil {
		return nil, err
	}
	h.metrics = promhttp.HandlerFor(tasklingprom.New(client).Registry(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})

	m := http.NewServeMux()
	read := func(pattern string, fn http.HandlerFunc) { m.Handle(pattern, h.readAccess(fn)) }
	write := func(pattern string, fn http.HandlerFunc) { m.Handle(pattern, h.writeAccess(fn)) }
	read("GET /api/v1/tasks", h.listTasks)
	read("GET /api/v1/tasks/{app}/{task}", h.getTask)
	read("GET /api/v1/tasks/{app}/{task}/executions", h.listExecutions)
	read("GET /api/v1/executions/{id}", h.getExecution)
	write("PATCH /api/v1/tasks/{app}/{task}/overrides", h.setOverrides)
	write("DELETE /api/v1/tasks/{app}/{task}/overrides", h.clearOverrides)
	// Other methods on an API path: a JSON 405 rather than the mux's plain-text one.
	for path, allow := range map[string]string{
		"/api/v1/tasks":                         "GET",
		"/api/v1/tasks/{app}/{task}":            "GET",
		"/api/v1/tasks/{app}/{task}/executions": "GET",
		"/api/v1/executions/{id}":               "GET",
		"/api/v1/tasks/{app}/{task}/overrides":  "PATCH, DELETE",
	} {
		m.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method", r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+allow)
		})
	}
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "", "no such API route: "+r.Method+" "+r.URL.Path)
	})
	m.Handle("GET /metrics", h.readAccess(h.metrics.ServeHTTP))
	m.Handle("GET /{$}", h.pageAccess(h.dashboardPage))
	m.Handle("GET /tasks/{app}/{task}", h.pageAccess(h.taskPage))
	m.Handle("GET /static/", staticFiles())
	h.mux = m
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) tokenOK(got string) bool {
	return h.opts.Token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(h.opts.Token)) == 1
}

func bearer(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(v, "Bearer ")
	return strings.TrimSpace(token), ok
}

func (h *Handler) readAccess(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.opts.ProtectReads {
			if t, ok := bearer(r); !ok || !h.tokenOK(t) {
				unauthorized(w)
				return
			}
		}
		next(w, r)
	})
}

func (h *Handler) writeAccess(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.opts.Token == "" {
			writeError(w, http.StatusForbidden, "", "the server is read-only: start it with an API token (TASKLING_API_TOKEN) to allow changes")
			return
		}
		if t, ok := bearer(r); !ok || !h.tokenOK(t) {
			unauthorized(w)
			return
		}
		next(w, r)
	})
}

// pageAccess guards the dashboard's pages: with ProtectReads, the token comes from the header or
// the taskling_token cookie; without one the page asks for it.
func (h *Handler) pageAccess(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.opts.ProtectReads {
			t, ok := bearer(r)
			if !ok {
				if c, err := r.Cookie("taskling_token"); err == nil {
					t, ok = c.Value, true
				}
			}
			if !ok || !h.tokenOK(t) {
				h.render(w, r, http.StatusUnauthorized, "login", h.basePage(r, "Sign in"))
				return
			}
		}
		next(w, r)
	})
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="taskling"`)
	writeError(w, http.StatusUnauthorized, "Authorization", "missing or wrong bearer token (Authorization: Bearer $TASKLING_API_TOKEN)")
}

// apiError is the body of every error response.
type apiError struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Status  int    `json:"status"`
	Field   string `json:"field,omitempty"` // the parameter, body field or header at fault
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, field, message string) {
	writeJSON(w, status, apiError{Error: errorBody{Status: status, Field: field, Message: message}})
}

// fail answers an error from the layers below: not found, invalid input naming its field, or a
// 500 whose details go to the log only.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, taskling.ErrNotFound):
		writeError(w, http.StatusNotFound, "", err.Error())
	case errors.Is(err, taskling.ErrInvalidArgument), errors.Is(err, taskling.ErrInvalidSettings):
		writeError(w, http.StatusBadRequest, "", err.Error())
	case errors.Is(err, context.Canceled):
		// The client went away.
	default:
		h.log.Error("taskling http: request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
		writeError(w, http.StatusInternalServerError, "", "internal error; see the server's log")
	}
}

// taskName reads and validates the {app} and {task} path segments.
func taskName(r *http.Request) (app, task, field string, err error) {
	app, task = r.PathValue("app"), r.PathValue("task")
	if err := taskling.ValidateName("application name", app); err != nil {
		return "", "", "app", err
	}
	if err := taskling.ValidateName("task name", task); err != nil {
		return "", "", "task", err
	}
	return app, task, "", nil
}

func (h *Handler) listTasks(w http.ResponseWriter, r *http.Request) {
	tasks, err := LoadTasks(r.Context(), h.client)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tasks": tasks})
}

func (h *Handler) getTask(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	t, err := LoadTask(r.Context(), h.client, app, task)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// DefaultPageSize is the page size of executions when the request gives none.
const DefaultPageSize = 50

// ParseExecutionsQuery reads status, before and limit from URL query values.
func ParseExecutionsQuery(get func(string) string) (q ExecutionsQuery, field string, err error) {
	q.Limit = DefaultPageSize
	if s := get("status"); s != "" {
		if _, err := taskling.ParseStatus(s); err != nil {
			return q, "status", fmt.Errorf("status %q is not one of in_progress, completed, failed, blocked, dead", s)
		}
		q.Status = s
	}
	if s := get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return q, "before", fmt.Errorf("before %q is not an execution id (a positive integer)", s)
		}
		q.Before = n
	}
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			return q, "limit", fmt.Errorf("limit %q: want an integer from 1 to %d", s, MaxPageSize)
		}
		q.Limit = n
	}
	return q, "", nil
}

func (h *Handler) listExecutions(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	q, field, err := ParseExecutionsQuery(r.URL.Query().Get)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	q.App, q.Task = app, task
	page, err := LoadExecutions(r.Context(), h.client, q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

func (h *Handler) getExecution(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusBadRequest, "id", fmt.Sprintf("execution id %q is not a positive integer", r.PathValue("id")))
		return
	}
	e, err := LoadExecution(r.Context(), h.client, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// OverridesRequest is the body of PATCH /api/v1/tasks/{app}/{task}/overrides. Absent (or null)
// fields are left as they are. Durations are Go duration strings ("30s").
type OverridesRequest struct {
	ConcurrencyLimit        *int    `json:"concurrency_limit"`
	Enabled                 *bool   `json:"enabled"`
	DeathMode               *string `json:"death_mode"` // "keepalive" or "override"
	KeepAliveInterval       *string `json:"keep_alive_interval"`
	KeepAliveDeathThreshold *string `json:"keep_alive_death_threshold"`
	OverrideThreshold       *string `json:"override_threshold"`
}

// FieldError is an invalid input, naming the field.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + " " + e.Message }

// Update validates the request and converts it, or returns a *FieldError.
func (o OverridesRequest) Update() (taskling.SettingsUpdate, error) {
	var u taskling.SettingsUpdate
	if o.ConcurrencyLimit != nil {
		if n := *o.ConcurrencyLimit; n != -1 && n < 1 {
			return u, &FieldError{"concurrency_limit", fmt.Sprintf("is %d; want -1 (unlimited) or at least 1", n)}
		}
		u.ConcurrencyLimit = o.ConcurrencyLimit
	}
	u.Enabled = o.Enabled
	if o.DeathMode != nil {
		var m taskling.DeathMode
		switch *o.DeathMode {
		case "keepalive":
			m = taskling.DeathModeKeepAlive
		case "override":
			m = taskling.DeathModeOverride
		default:
			return u, &FieldError{"death_mode", fmt.Sprintf("is %q; want \"keepalive\" or \"override\"", *o.DeathMode)}
		}
		u.DeathMode = &m
	}
	var err error
	if u.KeepAliveInterval, err = positiveDuration("keep_alive_interval", o.KeepAliveInterval); err != nil {
		return u, err
	}
	if u.KeepAliveDeathThreshold, err = positiveDuration("keep_alive_death_threshold", o.KeepAliveDeathThreshold); err != nil {
		return u, err
	}
	if u.OverrideThreshold, err = positiveDuration("override_threshold", o.OverrideThreshold); err != nil {
		return u, err
	}
	if u.KeepAliveInterval != nil && u.KeepAliveDeathThreshold != nil && *u.KeepAliveDeathThreshold < 2**u.KeepAliveInterval {
		return u, &FieldError{"keep_alive_death_threshold", fmt.Sprintf("(%s) must be at least twice keep_alive_interval (%s)", *u.KeepAliveDeathThreshold, *u.KeepAliveInterval)}
	}
	if u == (taskling.SettingsUpdate{}) {
		return u, &FieldError{"body", "names no override; give at least one of concurrency_limit, enabled, death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold"}
	}
	return u, nil
}

func positiveDuration(field string, s *string) (*time.Duration, error) {
	if s == nil {
		return nil, nil
	}
	d, err := time.ParseDuration(*s)
	if err != nil {
		return nil, &FieldError{field, fmt.Sprintf("%q is not a duration (like \"30s\" or \"2m\")", *s)}
	}
	if d <= 0 {
		return nil, &FieldError{field, fmt.Sprintf("is %s; want more than zero", d)}
	}
	return &d, nil
}

const maxBody = 64 << 10

func (h *Handler) setOverrides(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	var req OverridesRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		field, msg := "body", "is not a JSON object of overrides: "+err.Error()
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			field, msg = typeErr.Field, fmt.Sprintf("has the wrong type: want %s", typeErr.Type)
		} else if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field, msg = strings.Trim(name, `"`), "is not a known override"
		}
		writeError(w, http.StatusBadRequest, field, field+" "+msg)
		return
	}
	update, err := req.Update()
	if err != nil {
		var fe *FieldError
		errors.As(err, &fe)
		writeError(w, http.StatusBadRequest, fe.Field, fe.Error())
		return
	}
	if err := h.client.UpdateTaskSettings(r.Context(), app, task, update); err != nil {
		h.fail(w, r, err)
		return
	}
	h.respondTask(w, r, app, task)
}

func (h *Handler) clearOverrides(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	if err := h.client.ClearOverrides(r.Context(), app, task); err != nil {
		h.fail(w, r, err)
		return
	}
	h.respondTask(w, r, app, task)
}

func (h *Handler) respondTask(w http.ResponseWriter, r *http.Request, app, task string) {
	t, err := LoadTask(r.Context(), h.client, app, task)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}
