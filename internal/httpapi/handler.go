// Package httpapi is taskling's HTTP handler: a JSON API under /api/v1/, the web dashboard at
// /, and Prometheus metrics at /metrics. Users mount it through the public package dashboard;
// `taskling serve` serves it.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/taskling-go/taskling/internal/principals"
	"github.com/taskling-go/taskling/internal/storedjson"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/tasklingprom"
)

// Options configure the handler; the fields are documented on dashboard.Options, the public
// face of this package.
type Options struct {
	Token           string
	PrincipalsFile  string
	AllowedHosts    []string
	TrustedProxies  []string
	PublicReads     bool
	PublicMetrics   bool
	BasePath        string
	Logger          *zap.Logger
	RefreshInterval time.Duration
	RequestTimeout  time.Duration
}

// DefaultRequestTimeout bounds the database work of one request.
const DefaultRequestTimeout = 10 * time.Second

// Handler serves the API, the dashboard and the metrics of one taskling client.
type Handler struct {
	client *taskling.Client
	opts   Options
	// source is who may sign in: the principals file's and the single token's; nil: nobody, the
	// server is read-only.
	source   *principals.Source
	failures failures // refused sign-ins by address
	hosts    map[string]bool
	proxies  []netip.Prefix // Options.TrustedProxies
	log      *zap.Logger
	mux      *http.ServeMux
	metrics  http.Handler
	pages    *pages
	patterns []string // the routes served, for the tests
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
	if n := len(h.opts.Token); n > 0 && n < MinTokenLength {
		return nil, fmt.Errorf("httpapi: Options.Token is %d bytes; want at least %d (for example the output of `openssl rand -base64 32`)", n, MinTokenLength)
	}
	switch bp := h.opts.BasePath; {
	case bp == "":
		h.opts.BasePath = "/"
	case !strings.HasPrefix(bp, "/") || strings.ContainsAny(bp, "?#;, \t\r\n"):
		return nil, fmt.Errorf("httpapi: Options.BasePath is %q; want the path the handler is mounted at, like \"/taskling/\"", bp)
	case !strings.HasSuffix(bp, "/"):
		h.opts.BasePath = bp + "/"
	}
	if h.opts.RefreshInterval <= 0 {
		h.opts.RefreshInterval = 2 * time.Second
	}
	if h.opts.RequestTimeout <= 0 {
		h.opts.RequestTimeout = DefaultRequestTimeout
	}
	var err error
	if h.opts.Token != "" || h.opts.PrincipalsFile != "" {
		src, err := principals.NewSource(h.opts.PrincipalsFile, h.opts.Token)
		if err != nil {
			return nil, fmt.Errorf("httpapi: Options.PrincipalsFile: %w", err)
		}
		h.source = src
	}
	if h.hosts, err = allowedHosts(h.opts.AllowedHosts); err != nil {
		return nil, err
	}
	if h.proxies, err = trustedProxies(h.opts.TrustedProxies); err != nil {
		return nil, err
	}
	h.log = h.opts.Logger
	if h.log == nil {
		h.log = zap.NewNop()
	}
	if h.pages, err = newPages(); err != nil {
		return nil, err
	}
	h.metrics = promhttp.HandlerFor(tasklingprom.New(client).Registry(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	h.mux = h.routes()
	return h, nil
}

// routes is the handler's mux: the API, its 405s and 404s, the metrics, the pages.
func (h *Handler) routes() *http.ServeMux {
	m := http.NewServeMux()
	handle := func(pattern string, fn http.Handler) {
		m.Handle(pattern, fn)
		h.patterns = append(h.patterns, pattern)
	}
	read := func(pattern string, fn http.HandlerFunc) { handle(pattern, h.readAccess(fn)) }
	write := func(pattern string, fn http.HandlerFunc) { handle(pattern, h.writeAccess(fn)) }
	// A task's routes are also served under /api/v1/task with the task in the query
	// (?app=A&task=T): a name "." or ".." is a path segment that clients drop.
	taskRead := func(method, suffix string, fn http.HandlerFunc) {
		read(method+" /api/v1/tasks/{app}/{task}"+suffix, fn)
		read(method+" /api/v1/task"+suffix, taskFromQuery(fn))
	}
	taskWrite := func(method, suffix string, fn http.HandlerFunc) {
		write(method+" /api/v1/tasks/{app}/{task}"+suffix, fn)
		write(method+" /api/v1/task"+suffix, taskFromQuery(fn))
	}
	read("GET /api/v1/tasks", h.listTasks)
	taskRead("GET", "", h.getTask)
	taskRead("GET", "/executions", h.listExecutions)
	read("GET /api/v1/executions/{id}", h.getExecution)
	taskWrite("PATCH", "/overrides", h.setOverrides)
	taskWrite("DELETE", "/overrides", h.clearOverrides)
	taskWrite("PUT", "/keys", h.setKeyOverrides) // ?key=K: any key, "." and "" too
	taskWrite("DELETE", "/keys", h.clearKeyOverrides)
	write("PUT /api/v1/tasks/{app}/{task}/keys/{key}", h.setKeyOverrides)
	write("PUT /api/v1/tasks/{app}/{task}/keys/{$}", h.setKeyOverrides) // refused: see requestKey
	write("DELETE /api/v1/tasks/{app}/{task}/keys/{key}", h.clearKeyOverrides)
	write("DELETE /api/v1/tasks/{app}/{task}/keys/{$}", h.clearKeyOverrides)
	taskWrite("POST", "/retire", h.retire)
	taskWrite("POST", "/unretire", h.unretire)
	taskRead("GET", "/changes", h.listChanges)
	taskRead("GET", "/submissions", h.listSubmissions)
	taskWrite("POST", "/submissions", h.submit)
	read("GET /api/v1/submissions/{id}", h.getSubmission)
	write("POST /api/v1/submissions/{id}/cancel", h.cancelSubmission)
	read("GET /api/v1/executions/{id}/blocks", h.executionBlocks)
	taskRead("GET", "/blocks", h.taskBlocks)
	read("GET /api/v1/blocks/{id}", h.getBlock)
	write("POST /api/v1/blocks/{id}/force", h.forceBlock)
	// Other methods on an API path: a JSON 405 rather than the mux's plain-text one.
	allowed := map[string]string{
		"/api/v1/tasks":                         "GET",
		"/api/v1/executions/{id}":               "GET",
		"/api/v1/tasks/{app}/{task}/keys/{key}": "PUT, DELETE",
		"/api/v1/submissions/{id}":              "GET",
		"/api/v1/submissions/{id}/cancel":       "POST",
		"/api/v1/executions/{id}/blocks":        "GET",
		"/api/v1/blocks/{id}":                   "GET",
		"/api/v1/blocks/{id}/force":             "POST",
	}
	for suffix, allow := range map[string]string{
		"": "GET", "/executions": "GET", "/overrides": "PATCH, DELETE", "/keys": "PUT, DELETE", "/retire": "POST",
		"/unretire": "POST", "/changes": "GET", "/submissions": "GET, POST", "/blocks": "GET",
	} {
		allowed["/api/v1/tasks/{app}/{task}"+suffix] = allow
		allowed["/api/v1/task"+suffix] = allow
	}
	for path, allow := range allowed {
		m.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, "method", r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+allow)
		})
	}
	m.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "", "no such API route: "+r.Method+" "+r.URL.Path)
	})
	handle("GET /metrics", h.metricsAccess(h.metrics.ServeHTTP))
	handle("GET /{$}", h.pageAccess(h.dashboardPage))
	handle("GET /tasks/{app}/{task}", h.pageAccess(h.taskPage))
	handle("GET /task", h.pageAccess(taskFromQuery(h.taskPage))) // ?app=A&task=T, as in the API
	handle("GET /submissions/{id}", h.pageAccess(h.submissionPage))
	handle("GET /executions/{id}", h.pageAccess(h.executionPage))
	handle("GET /blocks/{id}", h.pageAccess(h.blockPage))
	handle("GET /login", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.renderLogin(w, r, http.StatusOK, "") }))
	handle("POST /login", http.HandlerFunc(h.login))
	handle("POST /logout", http.HandlerFunc(h.logout))
	handle("GET /static/", staticFiles())
	return m
}

// ServeHTTP implements http.Handler. A request for a host not allowed gets 421; a request's
// database work is bounded by Options.RequestTimeout.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !h.hostAllowed(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, "Host", "this server does not serve the host "+strconv.Quote(r.Host)+" (taskling serve --allowed-hosts)")
		return
	}
	if field, err := checkInput(r); err != nil {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			writeError(w, http.StatusBadRequest, field, err.Error())
		} else {
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.RequestTimeout)
	defer cancel()
	ctx = context.WithValue(ctx, whoKey{}, &who{})
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

// readHeaders are the request headers whose values the server reads, but for traceparent and
// tracestate: a malformed one is ignored, as the W3C asks of a receiver.
var readHeaders = []string{"Authorization", "Content-Type", "X-Forwarded-Proto", requestHeader, "X-Taskling-Partial"}

// checkInput holds every query parameter (its name and values) and the headers the server reads to
// the characters of names — valid UTF-8, no control character — so that no handler hands the
// database a string it refuses (a NUL byte or invalid UTF-8 failed a query with a 500), and
// returns the first at fault. The sign-in page's next is the exception: safeNext ignores one
// that is not a path inside the handler, so a crafted link still leads to the sign-in form.
func checkInput(r *http.Request) (field string, err error) {
	query := r.URL.Query()
	for _, name := range slices.Sorted(maps.Keys(query)) {
		if err := taskling.ValidateChars("the name of query parameter "+strconv.Quote(name), name); err != nil {
			return name, err
		}
		if name == "next" && r.URL.Path == "/login" {
			continue
		}
		for _, v := range query[name] {
			if err := taskling.ValidateChars("query parameter "+name, v); err != nil {
				return name, err
			}
		}
	}
	for _, name := range readHeaders {
		for _, v := range r.Header.Values(name) {
			if err := taskling.ValidateChars("header "+name, v); err != nil {
				return name, err
			}
		}
	}
	return "", nil
}

// taskFromQuery serves a task's route with the task named by the query parameters app and task,
// as the path segments {app} and {task} name it elsewhere.
func taskFromQuery(fn http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		r.SetPathValue("app", q.Get("app"))
		r.SetPathValue("task", q.Get("task"))
		fn(w, r)
	}
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

// writeJSON answers v: indented, stored JSON values (headers, block values) written as stored,
// compact, and nothing HTML-escaped, so that no answer is larger than what it shows
// (storedjson.Encode).
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = storedjson.Encode(w, v)
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
	case errors.Is(err, taskling.ErrSubmissionFinished), errors.Is(err, taskling.ErrTaskRetired):
		writeError(w, http.StatusConflict, "", err.Error())
	case errors.Is(err, context.Canceled):
		// The client went away.
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, "", "the database did not answer in time; try again")
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
	q, field, err := ParseTasksQuery(r.URL.Query().Get)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	tasks, err := LoadTasks(r.Context(), h.client, q)
	if errors.Is(err, taskling.ErrInvalidArgument) && q.Cursor != "" {
		// The other parameters are checked above: the cursor is what is wrong.
		writeError(w, http.StatusBadRequest, "cursor", err.Error())
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, tasks)
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

// pathID reads the {id} path segment; what names the kind of id in the error.
func pathID(w http.ResponseWriter, r *http.Request, what string) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusBadRequest, "id", fmt.Sprintf("%s id %q is not a positive integer", what, r.PathValue("id")))
		return 0, false
	}
	return id, true
}

func (h *Handler) getExecution(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "execution")
	if !ok {
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
	// KeyLimit overrides every key's limit: 0 for no key limit, or 1 to 10000.
	KeyLimit *int `json:"key_limit"`
	// Rate overrides the task's rate, KeyRate every key's: "30/1m", "500/1s,burst=50", or
	// "none" for no rate (docs/rates.md).
	Rate    *string `json:"rate"`
	KeyRate *string `json:"key_rate"`
	// By is a note recorded beside the principal that makes the change (its by).
	By string `json:"by"`
}

// KeyOverridesRequest is the body of PUT /api/v1/tasks/{app}/{task}/keys/{key}: the operator's
// override of the key's limit (1 to 10000), of its rate ("5/1m", "none"), or of both; an absent
// (or null) field is left as it is.
type KeyOverridesRequest struct {
	Limit *int    `json:"limit"`
	Rate  *string `json:"rate"`
	// By is a note recorded beside the principal that makes the change (its by).
	By string `json:"by"`
}

// update validates the request and converts it, or returns a *FieldError.
func (req KeyOverridesRequest) update() (taskling.KeySettingsUpdate, error) {
	switch {
	case req.Limit == nil && req.Rate == nil:
		return taskling.KeySettingsUpdate{}, &FieldError{"limit", "is missing; want 1 to 10000 (or a rate)"}
	case req.Limit != nil && (*req.Limit < 1 || *req.Limit > taskling.MaxConcurrencyLimit):
		return taskling.KeySettingsUpdate{}, &FieldError{"limit", fmt.Sprintf("is %d; want 1 to %d", *req.Limit, taskling.MaxConcurrencyLimit)}
	}
	rate, err := rateIn("rate", req.Rate)
	if err != nil {
		return taskling.KeySettingsUpdate{}, err
	}
	return taskling.KeySettingsUpdate{Limit: req.Limit, Rate: rate}, checkBy("by", req.By)
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
		if n := *o.ConcurrencyLimit; n != -1 && (n < 1 || n > taskling.MaxConcurrencyLimit) {
			return u, &FieldError{"concurrency_limit", fmt.Sprintf("is %d; want -1 (unlimited) or 1 to %d", n, taskling.MaxConcurrencyLimit)}
		}
		u.ConcurrencyLimit = o.ConcurrencyLimit
	}
	u.Enabled = o.Enabled
	if o.KeyLimit != nil {
		if n := *o.KeyLimit; n < 0 || n > taskling.MaxConcurrencyLimit {
			return u, &FieldError{"key_limit", fmt.Sprintf("is %d; want 0 (no key limit) or 1 to %d", n, taskling.MaxConcurrencyLimit)}
		}
		u.KeyLimit = o.KeyLimit
	}
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
	if u.KeepAliveInterval, err = durationIn("keep_alive_interval", o.KeepAliveInterval, taskling.MinKeepAliveInterval, taskling.MaxKeepAliveInterval); err != nil {
		return u, err
	}
	if u.KeepAliveDeathThreshold, err = durationIn("keep_alive_death_threshold", o.KeepAliveDeathThreshold, taskling.MinThreshold, taskling.MaxThreshold); err != nil {
		return u, err
	}
	if u.OverrideThreshold, err = durationIn("override_threshold", o.OverrideThreshold, taskling.MinThreshold, taskling.MaxThreshold); err != nil {
		return u, err
	}
	if u.Rate, err = rateIn("rate", o.Rate); err != nil {
		return u, err
	}
	if u.KeyRate, err = rateIn("key_rate", o.KeyRate); err != nil {
		return u, err
	}
	if u.KeepAliveInterval != nil && u.KeepAliveDeathThreshold != nil && *u.KeepAliveDeathThreshold < 2**u.KeepAliveInterval {
		return u, &FieldError{"keep_alive_death_threshold", fmt.Sprintf("(%s) must be at least twice keep_alive_interval (%s)", *u.KeepAliveDeathThreshold, *u.KeepAliveInterval)}
	}
	if u == (taskling.SettingsUpdate{}) {
		return u, &FieldError{"body", "names no override; give at least one of concurrency_limit, enabled, death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold, key_limit, rate, key_rate"}
	}
	return u, checkBy("by", o.By)
}

// rateIn reads a rate ("30/1m", "none"; nil stays nil), or names field in a *FieldError.
func rateIn(field string, s *string) (*taskling.Rate, error) {
	if s == nil {
		return nil, nil
	}
	if strings.TrimSpace(*s) == "" {
		return nil, &FieldError{field, `is empty; want a rate like "30/1m" or "500/1s,burst=50", or "none"`}
	}
	r, err := taskling.ParseRate(*s)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), taskling.ErrInvalidSettings.Error()+": ")
		return nil, &FieldError{field, fmt.Sprintf("%q is not a valid rate: %s", *s, msg)}
	}
	return &r, nil
}

func durationIn(field string, s *string, min, max time.Duration) (*time.Duration, error) {
	if s == nil {
		return nil, nil
	}
	d, err := time.ParseDuration(*s)
	if err != nil {
		return nil, &FieldError{field, fmt.Sprintf("%q is not a duration (like \"30s\" or \"2m\")", *s)}
	}
	if d < min {
		return nil, &FieldError{field, fmt.Sprintf("is %s; want at least %s", d, min)}
	}
	if d > max {
		return nil, &FieldError{field, fmt.Sprintf("is %s; want at most %s", d, max)}
	}
	return &d, nil
}

// settingsField is the API's name of a setting TaskSettings names Field ("KeepAliveInterval" →
// "keep_alive_interval").
func settingsField(field string) string {
	var b strings.Builder
	for i, r := range field {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

const maxBody = 64 << 10

// bodySpec says how to read a request's JSON body.
type bodySpec struct {
	what    string // what the object holds, for errors: "overrides"
	unknown string // what an unknown field is not: "override"
	limit   int64  // largest body, in bytes
	emptyOK bool   // no body at all means {}
}

// decodeBody decodes the request's JSON object into v, or answers 400 naming the field at fault
// (413 past the size limit) and returns false. Unknown fields and trailing data are refused.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, spec bodySpec) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, spec.limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == io.EOF && spec.emptyOK {
		return true
	}
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	} else if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "body", fmt.Sprintf("body is larger than %d bytes", spec.limit))
		return false
	}
	field, msg := "body", "is not a JSON object of "+spec.what+": "+err.Error()
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		field, msg = typeErr.Field, fmt.Sprintf("has the wrong type: want %s", typeErr.Type)
	} else if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field, msg = strings.Trim(name, `"`), "is not a known "+spec.unknown
	}
	writeError(w, http.StatusBadRequest, field, field+" "+msg)
	return false
}

func (h *Handler) setOverrides(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	var req OverridesRequest
	if !decodeBody(w, r, &req, bodySpec{what: "overrides", unknown: "override", limit: maxBody}) {
		return
	}
	update, err := req.Update()
	if err != nil {
		var fe *FieldError
		errors.As(err, &fe)
		writeError(w, http.StatusBadRequest, fe.Field, fe.Error())
		return
	}
	if err := h.as(r, req.By).UpdateTaskSettings(r.Context(), app, task, update); err != nil {
		// Overrides that the declared settings do not fit: name the field at fault.
		var se *taskling.SettingsError
		if errors.As(err, &se) {
			writeError(w, http.StatusBadRequest, settingsField(se.Field), se.Error())
			return
		}
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
	if err := h.as(r, "").ClearOverrides(r.Context(), app, task); err != nil {
		h.fail(w, r, err)
		return
	}
	h.respondTask(w, r, app, task)
}

func (h *Handler) setKeyOverrides(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	key, err := requestKey(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "key", err.Error())
		return
	}
	var req KeyOverridesRequest
	if !decodeBody(w, r, &req, bodySpec{what: "key overrides", unknown: "key override", limit: maxBody}) {
		return
	}
	update, err := req.update()
	if err != nil {
		var fe *FieldError
		errors.As(err, &fe)
		writeError(w, http.StatusBadRequest, fe.Field, fe.Error())
		return
	}
	if err := h.as(r, req.By).UpdateKeySettings(r.Context(), app, task, key, update); err != nil {
		h.fail(w, r, err)
		return
	}
	h.respondTask(w, r, app, task)
}

func (h *Handler) clearKeyOverrides(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	key, err := requestKey(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "key", err.Error())
		return
	}
	if err := h.as(r, "").ClearKeyOverrides(r.Context(), app, task, key); err != nil {
		h.fail(w, r, err)
		return
	}
	h.respondTask(w, r, app, task)
}

// requestKey reads the key of a key route: the query parameter key (any key: "" is the empty
// key), or the path segment after keys/ of the older route. That segment cannot be "." or "..",
// which clients drop (keys/. arrives as keys/), so an empty one is refused rather than read as
// the empty key.
func requestKey(r *http.Request) (string, error) {
	query := r.URL.Query()
	key, inPath := r.PathValue("key"), !strings.HasSuffix(r.Pattern, "/keys")
	switch {
	case inPath && query.Has("key"):
		return "", errors.New("key is given both in the path and as ?key=; give it once, as ?key=")
	case inPath && key == "":
		return "", errors.New(`key is empty in the path (keys/), which is also what keys/. becomes on its way; give the key as ?key= (the empty key: ?key=)`)
	case !inPath && !query.Has("key"):
		return "", errors.New("key is missing; give it as ?key=K (the empty key: ?key=)")
	case !inPath:
		key = query.Get("key")
	}
	return key, taskling.ValidateKey("key", key)
}

func (h *Handler) respondTask(w http.ResponseWriter, r *http.Request, app, task string) {
	t, err := LoadTask(r.Context(), h.client, app, task)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}
