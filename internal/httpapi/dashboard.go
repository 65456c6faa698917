package httpapi

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskling-go/taskling/internal/principals"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/tasklingtype"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFS embed.FS

// pages are the dashboard's templates, one set per page (each with the shared layout).
type pages struct {
	sets map[string]*template.Template
}

var templateFuncs = template.FuncMap{
	"taskHref": taskHref,
	"taskAPI":  taskAPI,
	"limitText": func(n int) string {
		if n == -1 {
			return "unlimited"
		}
		return fmt.Sprint(n)
	},
	"deref": func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	},
	"deref_int": func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	},
	"clock":     clock,
	"join":      strings.Join,
	"ratio":     Percent,
	"blockSpan": blockSpan,
	"stored":    storedOnPage,
	"preview":   previewOnPage,
	"percent": func(done, total *int64) string {
		if done == nil || total == nil || *total <= 0 {
			return ""
		}
		return fmt.Sprintf("%d%%", Percent(*done, *total))
	},
}

// dotSegment reports whether a name is "." or "..": a path segment that browsers and HTTP clients
// drop from a URL, percent-encoded or not. New tasks may not be so named (ValidateNewName); one
// made before is linked with its names in the query.
func dotSegment(name string) bool { return name == "." || name == ".." }

// taskHref is the link to a task's page, relative to the handler's root: tasks/APP/TASK, or
// task?app=APP&task=TASK for a name that is a dot segment.
func taskHref(app, task string) string {
	if dotSegment(app) || dotSegment(task) {
		return "task?" + url.Values{"app": {app}, "task": {task}}.Encode()
	}
	return "tasks/" + url.PathEscape(app) + "/" + url.PathEscape(task)
}

// taskAPI is the API route of a task, relative to the handler's root, suffix its rest
// ("/overrides"): api/v1/tasks/APP/TASK/overrides, or api/v1/task/overrides?app=APP&task=TASK for
// a name that is a dot segment.
func taskAPI(app, task, suffix string) string {
	if dotSegment(app) || dotSegment(task) {
		return "api/v1/task" + suffix + "?" + url.Values{"app": {app}, "task": {task}}.Encode()
	}
	return "api/v1/tasks/" + url.PathEscape(app) + "/" + url.PathEscape(task) + suffix
}

// clock is how the pages show a time: UTC, to the second.
func clock(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

func newPages() (*pages, error) {
	p := &pages{sets: map[string]*template.Template{}}
	for _, name := range []string{"dashboard", "task", "submission", "execution", "block", "login"} {
		t, err := template.New("layout.html").Funcs(templateFuncs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("httpapi: templates: %w", err)
		}
		p.sets[name] = t
	}
	return p, nil
}

func staticFiles() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.StripPrefix("/static/", files).ServeHTTP(w, r)
	})
}

// page is what every template receives.
type page struct {
	Title string
	// Base is the relative path from the page to the handler's root ("" or "../../"), so the
	// dashboard works wherever the handler is mounted.
	Base      string
	RefreshMS int64
	// CanWrite: the server has principals, so changes are possible; SignedIn: this browser holds
	// a session (or the request a bearer token) of Principal; MayChange: that principal has the
	// operate role.
	CanWrite   bool
	SignedIn   bool
	Principal  principals.Principal
	MayChange  bool
	Data       any
	RenderedAt time.Time
}

func (h *Handler) basePage(r *http.Request, title string) page {
	depth := strings.Count(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	id, _ := h.identify(r)
	return page{
		Title: title, Base: strings.Repeat("../", depth), RefreshMS: h.opts.RefreshInterval.Milliseconds(),
		CanWrite: h.source != nil, SignedIn: id.ok, Principal: id.principal, MayChange: id.ok && id.principal.MayChange(),
		RenderedAt: time.Now(),
	}
}

// render writes a page; a request from the auto-refresh (header X-Taskling-Partial) gets only
// its "summary" and "content" blocks (layout.html's "partial"), not its forms.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	tmpl := "layout.html"
	if r.Header.Get("X-Taskling-Partial") != "" {
		tmpl = "partial"
	}
	var buf bytes.Buffer
	if err := h.pages.sets[name].ExecuteTemplate(&buf, tmpl, p); err != nil {
		h.log.Sugar().Errorw("taskling http: render page", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	page := showInvisible(buf.Bytes())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	w.WriteHeader(status)
	_, _ = w.Write(page)
}

// showInvisible writes the characters taskling.Invisible names (bidi overrides, zero-width
// characters…) as the text \uXXXX: html/template keeps them, and a browser would obey a
// right-to-left override in a stored name instead of showing it. The templates hold none, so
// every one comes from stored text.
func showInvisible(b []byte) []byte {
	if !bytes.ContainsFunc(b, taskling.Invisible) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if taskling.Invisible(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return out
}

// dashboardData is the tasks list page's data: the filters as asked, a page of tasks (each row
// opening its application's group when sorted by name) and the links to the pages around it.
type dashboardData struct {
	Query        TasksQuery
	Rows         []dashboardRow
	Total        int
	Applications []string
	Statuses     []string
	Sorts        []string
	// Filtered: a filter is set (an empty page then says no task matches, not that none exist).
	Filtered bool
	// NextURL and PrevURL are the next and previous pages' query strings ("" if none).
	NextURL, PrevURL string
}

type dashboardRow struct {
	Task
	Group string // the application, on the first row of its group; "" on the others
}

func (h *Handler) dashboardPage(w http.ResponseWriter, r *http.Request) {
	q, _, err := ParseTasksQuery(r.URL.Query().Get)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	list, err := LoadTasks(r.Context(), h.client, q)
	if errors.Is(err, taskling.ErrInvalidArgument) && q.Cursor != "" {
		http.Error(w, "cursor: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	data := dashboardData{
		Query: q, Total: list.Total, Applications: list.Applications,
		Statuses: []string{string(taskling.TaskBusy), string(taskling.TaskAtLimit), string(taskling.TaskWaiting), string(taskling.TaskIdle), string(taskling.TaskRetired)},
		Sorts:    []string{string(taskling.TaskSortName), string(taskling.TaskSortBusy)},
		Filtered: q.Search != "" || q.App != "" || q.Status != "",
	}
	group := ""
	for i, t := range list.Tasks {
		row := dashboardRow{Task: t}
		if q.Sort != string(taskling.TaskSortBusy) && (i == 0 || t.Application != group) {
			row.Group, group = t.Application, t.Application
		}
		data.Rows = append(data.Rows, row)
	}
	link := func(cursor string) string {
		v := url.Values{}
		for k, val := range map[string]string{"q": q.Search, "app": q.App, "status": q.Status, "sort": q.Sort, "cursor": cursor} {
			if val != "" {
				v.Set(k, val)
			}
		}
		if r.URL.Query().Get("limit") != "" {
			v.Set("limit", fmt.Sprint(q.Limit))
		}
		return "?" + v.Encode()
	}
	if list.NextCursor != nil {
		data.NextURL = link(*list.NextCursor)
	}
	if list.PrevCursor != "" {
		data.PrevURL = link(list.PrevCursor)
	} else if q.Cursor != "" && len(list.Tasks) == 0 {
		data.PrevURL = link("") // past the end: back to the first page
	}
	p := h.basePage(r, "Tasks")
	p.Data = data
	h.render(w, r, http.StatusOK, "dashboard", p)
}

// taskPageData is the task page's data.
type taskPageData struct {
	// Detail is read in one snapshot: its summary and its slots agree.
	Detail TaskDetail
	// ListedSlots counts the slots listed that are not retiring: the limit in force, unless a
	// changed limit waits for the next start to resize the list.
	ListedSlots int
	Executions  []Execution
	// Submissions: the running ones, the waiting ones in queue order, then the recently
	// finished ones; MoreWaiting says the queue goes on past the waiting ones shown.
	Submissions []submissionRow
	MoreWaiting bool
	Blocks      taskBlocks
	// Timeline: the last hour's slot use and grants / denials / reclaims per minute (timeline.go).
	Timeline timelineView
	// Changes: the newest operator changes; MoreChanges says older ones exist.
	Changes     []Change
	MoreChanges bool
}

// submissionRow is a submission as a page shows it.
type submissionRow struct {
	tasklingtype.Submission
	Cancel bool // this browser may cancel it: show the button
}

// recentOnTaskPage is how many executions, and submissions of each kind, the task page lists.
const recentOnTaskPage = 20

// canCancel reports whether the page offers to cancel s: it has not finished, no cancel was
// asked yet, and the browser may make changes.
func canCancel(p page, s tasklingtype.Submission) bool {
	active := s.Status == tasklingtype.SubmissionWaiting || s.Status == tasklingtype.SubmissionInProgress
	return p.MayChange && active && !s.CancelRequested
}

func (h *Handler) taskPage(w http.ResponseWriter, r *http.Request) {
	app, task, _, err := taskName(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	t, err := LoadTask(r.Context(), h.client, app, task)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	timeline, err := loadTimeline(r.Context(), h.client, app, task, t.Task.Limit)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	execs, err := LoadExecutions(r.Context(), h.client, ExecutionsQuery{App: app, Task: task, Limit: recentOnTaskPage})
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	queue, err := LoadSubmissionQueue(r.Context(), h.client, app, task, recentOnTaskPage)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	changes, err := LoadChanges(r.Context(), h.client, ChangesQuery{App: app, Task: task, Limit: recentOnTaskPage})
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	p := h.basePage(r, app+"/"+task)
	blocks, err := h.loadTaskBlocks(r, p, app, task)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	data := taskPageData{Detail: t, Executions: execs.Executions, MoreWaiting: len(queue.Waiting) == recentOnTaskPage, Blocks: blocks, Timeline: timeline,
		Changes: changes.Changes, MoreChanges: changes.NextBefore != nil}
	for _, sl := range t.Slots {
		if sl.Status != string(tasklingtype.SlotRetiring) {
			data.ListedSlots++
		}
	}
	for _, group := range [][]tasklingtype.Submission{queue.Running, queue.Waiting, queue.Finished} {
		for _, s := range group {
			data.Submissions = append(data.Submissions, submissionRow{Submission: s, Cancel: canCancel(p, s)})
		}
	}
	p.Data = data
	h.render(w, r, http.StatusOK, "task", p)
}

// submissionPageData is the submission page's data.
type submissionPageData struct {
	SubmissionDetail
	Cancel bool
}

func (h *Handler) submissionPage(w http.ResponseWriter, r *http.Request) {
	id, ok := pageID(w, r, "submission")
	if !ok {
		return
	}
	s, err := LoadSubmission(r.Context(), h.client, id)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	p := h.basePage(r, fmt.Sprintf("Submission #%d", id))
	p.Data = submissionPageData{SubmissionDetail: s, Cancel: canCancel(p, s.Submission)}
	h.render(w, r, http.StatusOK, "submission", p)
}

func isNotFound(err error) bool { return errors.Is(err, taskling.ErrNotFound) }

func (h *Handler) pageError(w http.ResponseWriter, r *http.Request, err error) {
	if isNotFound(err) {
		http.Error(w, string(showInvisible([]byte(err.Error()))), http.StatusNotFound)
		return
	}
	h.log.Sugar().Errorw("taskling http: page failed", "path", r.URL.Path, "error", err)
	http.Error(w, "internal error; see the server's log", http.StatusInternalServerError)
}
