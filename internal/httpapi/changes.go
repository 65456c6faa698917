package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/taskling-go/taskling/taskling"
)

// Retirement is when, and by whom (the principal), a task or its schedule was retired.
type Retirement struct {
	At time.Time `json:"at"`
	By string    `json:"by"`
}

func retirementView(r *taskling.Retirement) *Retirement {
	if r == nil {
		return nil
	}
	return &Retirement{At: r.At, By: r.By}
}

// Change is one operator change of a task: who (the principal, null on changes recorded
// before principals were; and by, the note given beside it or else the principal), when, which
// field, its old and new value as text (null: not overridden, the task inherits what its hosts
// declare).
type Change struct {
	ID        int64     `json:"id"`
	At        time.Time `json:"at"`
	Principal *string   `json:"principal"`
	By        string    `json:"by"`
	Field     string    `json:"field"`
	Old       *string   `json:"old"`
	New       *string   `json:"new"`
}

// PrincipalText is the principal as pages and tables show it: "-" when none was recorded.
func (c Change) PrincipalText() string {
	if c.Principal == nil {
		return "-"
	}
	return *c.Principal
}

// OldText and NewText are the values as pages and tables show them.
func (c Change) OldText() string { return valueText(c.Old) }

// NewText is the new value as pages and tables show it.
func (c Change) NewText() string { return valueText(c.New) }

func valueText(p *string) string {
	if p == nil {
		return "inherited"
	}
	return *p
}

// ChangePage is a page of a task's changes, newest first. NextBefore, when not null, is the
// "before" parameter of the next page.
type ChangePage struct {
	Changes    []Change `json:"changes"`
	NextBefore *int64   `json:"next_before"`
}

// ChangesQuery selects a page of a task's changes.
type ChangesQuery struct {
	App, Task string
	Before    int64 // 0: from the newest
	Limit     int
}

// ParseChangesQuery reads before and limit from URL query values; field names the bad one.
func ParseChangesQuery(get func(string) string) (q ChangesQuery, field string, err error) {
	q.Limit = taskling.DefaultChangesPage
	if s := get("before"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return q, "before", fmt.Errorf("before %q is not a change id (a positive integer)", s)
		}
		q.Before = n
	}
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > taskling.MaxChangesPage {
			return q, "limit", fmt.Errorf("limit %q: want an integer from 1 to %d", s, taskling.MaxChangesPage)
		}
		q.Limit = n
	}
	return q, "", nil
}

// LoadChanges returns a page of a task's changes, newest first, or an error wrapping
// taskling.ErrNotFound when the task does not exist.
func LoadChanges(ctx context.Context, c *taskling.Client, q ChangesQuery) (ChangePage, error) {
	p, err := c.TaskChanges(ctx, q.App, q.Task, &taskling.ChangeFilter{Before: q.Before, Limit: q.Limit})
	if err != nil {
		return ChangePage{}, err
	}
	page := ChangePage{Changes: make([]Change, len(p.Changes))}
	for i, ch := range p.Changes {
		page.Changes[i] = Change{ID: ch.ID, At: ch.At, By: ch.By, Field: ch.Field, Old: ch.Old, New: ch.New}
		if ch.Principal != "" {
			page.Changes[i].Principal = &ch.Principal
		}
	}
	if p.NextBefore != 0 {
		next := p.NextBefore
		page.NextBefore = &next
	}
	return page, nil
}

func (h *Handler) listChanges(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	q, field, err := ParseChangesQuery(r.URL.Query().Get)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	q.App, q.Task = app, task
	page, err := LoadChanges(r.Context(), h.client, q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// RetireRequest is the optional body of POST /api/v1/tasks/{app}/{task}/retire and /unretire.
type RetireRequest struct {
	// ScheduleOnly retires (or unretires) the task's schedule only.
	ScheduleOnly bool `json:"schedule_only"`
	// By is a note recorded beside the principal that makes the change (its by).
	By string `json:"by"`
}

// checkBy returns a *FieldError for a note a request gives beside its principal: a name, as the
// library checks it.
func checkBy(field, by string) error {
	if by == "" {
		return nil
	}
	if err := taskling.ValidateOperator(field, by); err != nil {
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, ": "+field+" "); ok {
			msg = after // "contains control character U+000A"
		}
		return &FieldError{field, msg}
	}
	return nil
}

func (h *Handler) retire(w http.ResponseWriter, r *http.Request) { h.changeRetirement(w, r, true) }

func (h *Handler) unretire(w http.ResponseWriter, r *http.Request) { h.changeRetirement(w, r, false) }

func (h *Handler) changeRetirement(w http.ResponseWriter, r *http.Request, retire bool) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	var req RetireRequest
	if !decodeBody(w, r, &req, bodySpec{what: "retire options", unknown: "retire option", limit: 16 << 10, emptyOK: true}) {
		return
	}
	if err := checkBy("by", req.By); err != nil {
		badField(w, err)
		return
	}
	op := h.as(r, req.By)
	switch {
	case retire && req.ScheduleOnly:
		err = op.RetireSchedule(r.Context(), app, task)
	case retire:
		err = op.RetireTask(r.Context(), app, task)
	case req.ScheduleOnly:
		err = op.UnretireSchedule(r.Context(), app, task)
	default:
		err = op.UnretireTask(r.Context(), app, task)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.respondTask(w, r, app, task)
}
