package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/taskling-go/taskling/taskling"
)

// SubmitRequest is the body of POST /api/v1/tasks/{app}/{task}/submissions. Every field is
// optional; an empty body submits with the defaults.
type SubmitRequest struct {
	// Header is any JSON value (null: none), handed to every attempt.
	Header json.RawMessage `json:"header"`
	// ReferenceValue makes the submission idempotent: a duplicate returns the first one's id.
	ReferenceValue *string `json:"reference_value"`
	// Priority orders the waiting submissions: higher first. Default 0.
	Priority *int `json:"priority"`
	// MaxAttempts bounds the attempts: 1 to taskling.MaxMaxAttempts (default
	// taskling.DefaultMaxAttempts).
	MaxAttempts *int `json:"max_attempts"`
	// Key and Cost are the attempts' key (default none) and cost (default 1): see docs/keys.md.
	Key  *string `json:"key"`
	Cost *int    `json:"cost"`
}

// Options validates the request and converts it, or returns a *FieldError naming the JSON field.
func (s SubmitRequest) Options() (*taskling.SubmitOptions, error) {
	o := &taskling.SubmitOptions{}
	if h := bytes.TrimSpace(s.Header); len(h) > 0 && !bytes.Equal(h, []byte("null")) {
		var compact bytes.Buffer
		if err := json.Compact(&compact, h); err != nil {
			return nil, &FieldError{"header", "is not JSON: " + err.Error()}
		}
		o.Header = json.RawMessage(compact.Bytes())
		// Its length, and what jsonb cannot store (\u0000, an unpaired surrogate, 1e999999).
		if err := taskling.ValidateHeader("header", o.Header); err != nil {
			return nil, &FieldError{"header", strings.TrimPrefix(err.Error(), taskling.ErrInvalidArgument.Error()+": header ")}
		}
	}
	if r := s.ReferenceValue; r != nil {
		if err := checkText(*r, taskling.MaxReferenceValueLength); err != "" {
			return nil, &FieldError{"reference_value", err}
		}
		o.ReferenceValue = *r
	}
	if p := s.Priority; p != nil {
		if *p < -1<<31 || *p > 1<<31-1 {
			return nil, &FieldError{"priority", fmt.Sprintf("is %d; want %d to %d", *p, -1<<31, 1<<31-1)}
		}
		o.Priority = *p
	}
	if m := s.MaxAttempts; m != nil {
		if *m < 1 || *m > taskling.MaxMaxAttempts {
			return nil, &FieldError{"max_attempts", fmt.Sprintf("is %d; want 1 to %d", *m, taskling.MaxMaxAttempts)}
		}
		o.MaxAttempts = *m
	}
	if k := s.Key; k != nil {
		if err := taskling.ValidateKey("key", *k); err != nil {
			return nil, &FieldError{"key", strings.TrimPrefix(err.Error(), taskling.ErrInvalidArgument.Error()+": key ")}
		}
		o.Key = *k
	}
	if c := s.Cost; c != nil {
		if *c < 1 || *c > taskling.MaxConcurrencyLimit {
			return nil, &FieldError{"cost", fmt.Sprintf("is %d; want 1 to %d", *c, taskling.MaxConcurrencyLimit)}
		}
		o.Cost = *c
	}
	return o, nil
}

// CancelRequest is the optional body of POST /api/v1/submissions/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason"`
}

// Validate returns a *FieldError for a reason the database would refuse.
func (c CancelRequest) Validate() error {
	if err := checkText(c.Reason, taskling.MaxCancelReasonLength); err != "" {
		return &FieldError{"reason", err}
	}
	return nil
}

// checkText mirrors the library's rules for stored free text, so the error names the JSON field.
func checkText(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("is %d bytes; at most %d allowed", len(s), max)
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL character"
	}
	return ""
}

// badField answers 400 for a *FieldError, naming its field ("body" for any other error).
func badField(w http.ResponseWriter, err error) {
	field := "body"
	var fe *FieldError
	if errors.As(err, &fe) {
		field = fe.Field
	}
	writeError(w, http.StatusBadRequest, field, err.Error())
}

// maxSubmitBody leaves room for the largest header, JSON-escaped reference and other fields.
const maxSubmitBody = taskling.MaxHeaderLength + 32<<10

func (h *Handler) submit(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	var req SubmitRequest
	if !decodeBody(w, r, &req, bodySpec{what: "submission options", unknown: "submission option", limit: maxSubmitBody, emptyOK: true}) {
		return
	}
	opts, err := req.Options()
	if err != nil {
		badField(w, err)
		return
	}
	opts.TraceContext = requestTrace(r)
	// A duplicate reference_value also answers 201 with the first submission's id: the client
	// does not say whether the row is new.
	id, err := h.client.Submit(r.Context(), app, task, opts)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Location", h.opts.BasePath+"api/v1/submissions/"+strconv.FormatInt(id, 10))
	writeJSON(w, http.StatusCreated, SubmitResponse{ID: id})
}

// requestTrace is the W3C trace context of a request's traceparent and tracestate headers, stored
// with the submission. As the W3C recommendation asks of a receiver, a malformed one is ignored
// (nothing is stored), not refused; a malformed tracestate alone is dropped.
func requestTrace(r *http.Request) taskling.TraceContext {
	tc := taskling.TraceContext{Traceparent: r.Header.Get("traceparent")}
	if taskling.ValidateTraceContext("traceparent", tc) != nil {
		return taskling.TraceContext{}
	}
	tc.Tracestate = strings.Join(r.Header.Values("tracestate"), ",")
	if taskling.ValidateTraceContext("tracestate", tc) != nil {
		tc.Tracestate = ""
	}
	return tc
}

func (h *Handler) listSubmissions(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	q, field, err := ParseSubmissionsQuery(r.URL.Query().Get)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	q.App, q.Task = app, task
	page, err := LoadSubmissions(r.Context(), h.client, q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

func (h *Handler) getSubmission(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "submission")
	if !ok {
		return
	}
	s, err := LoadSubmission(r.Context(), h.client, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *Handler) cancelSubmission(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "submission")
	if !ok {
		return
	}
	var req CancelRequest
	if !decodeBody(w, r, &req, bodySpec{what: "cancel options", unknown: "cancel option", limit: 16 << 10, emptyOK: true}) {
		return
	}
	if err := req.Validate(); err != nil {
		badField(w, err)
		return
	}
	if _, err := h.as(r, "").CancelSubmission(r.Context(), id, req.Reason); err != nil {
		h.fail(w, r, err)
		return
	}
	s, err := LoadSubmission(r.Context(), h.client, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}
