package main

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/taskling"
)

//go:embed templates/*.html
var templateFS embed.FS

var pages = template.Must(template.ParseFS(templateFS, "templates/*.html"))

// serve serves the web app on cfg.addr until ctx ends.
func serve(ctx context.Context, cfg config, pool *pgxpool.Pool, client *taskling.Client) error {
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	w := &web{pool: pool, client: client, maxUpload: cfg.maxUpload}
	srv := &http.Server{Handler: w.routes(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("webjobs: listening on %s\n", browseURL(ln.Addr()))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("stop the web server: %w", err)
	}
	return nil
}

// browseURL is the URL to open for a listener's address (":8080" listens on all of them).
func browseURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

type web struct {
	pool      *pgxpool.Pool
	client    *taskling.Client
	maxUpload int64
}

func (w *web) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", w.index)
	mux.HandleFunc("POST /uploads", w.upload)
	mux.HandleFunc("GET /uploads/{id}", w.progressPage)
	mux.HandleFunc("GET /uploads/{id}/status", w.statusJSON)
	return mux
}

type recentUpload struct {
	ID         int64
	FileName   string
	UploadedAt time.Time
}

func (w *web) index(rw http.ResponseWriter, r *http.Request) {
	rows, err := w.pool.Query(r.Context(), `SELECT id, file_name, uploaded_at FROM webjobs_upload ORDER BY id DESC LIMIT 10`)
	var recent []recentUpload
	if err == nil {
		recent, err = pgx.CollectRows(rows, pgx.RowToStructByPos[recentUpload])
	}
	if err != nil {
		internalError(rw, "list uploads", err)
		return
	}
	render(rw, "index.html", map[string]any{"Recent": recent, "MaxUpload": sizeString(w.maxUpload)})
}

// upload stores the file and submits its job in one transaction: the job exists if and only if
// the upload is stored.
func (w *web) upload(rw http.ResponseWriter, r *http.Request) {
	// Room for the multipart framing around the file; the file itself is checked below.
	r.Body = http.MaxBytesReader(rw, r.Body, w.maxUpload+64<<10)
	f, hdr, err := r.FormFile("file")
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(rw, "file too large: at most "+sizeString(w.maxUpload), http.StatusRequestEntityTooLarge)
		return
	case errors.Is(err, http.ErrMissingFile):
		http.Error(rw, "no file: choose a text or CSV file to upload (form field \"file\")", http.StatusBadRequest)
		return
	case err != nil:
		http.Error(rw, "bad upload: "+err.Error(), http.StatusBadRequest)
		return
	}
	defer f.Close()
	defer func() { _ = r.MultipartForm.RemoveAll() }()
	body, err := io.ReadAll(io.LimitReader(f, w.maxUpload+1))
	switch {
	case err != nil:
		http.Error(rw, "bad upload: "+err.Error(), http.StatusBadRequest)
		return
	case int64(len(body)) > w.maxUpload:
		http.Error(rw, "file too large: at most "+sizeString(w.maxUpload), http.StatusRequestEntityTooLarge)
		return
	case len(body) == 0:
		http.Error(rw, "the file is empty", http.StatusBadRequest)
		return
	case !utf8.Valid(body) || bytes.IndexByte(body, 0) >= 0:
		http.Error(rw, "not a text file: want UTF-8 text, such as CSV", http.StatusBadRequest)
		return
	}
	id, err := w.store(r.Context(), fileName(hdr.Filename), body)
	if err != nil {
		internalError(rw, "store an upload", err)
		return
	}
	http.Redirect(rw, r, fmt.Sprintf("/uploads/%d", id), http.StatusSeeOther)
}

func (w *web) store(ctx context.Context, name string, body []byte) (id int64, err error) {
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO webjobs_upload (file_name, body) VALUES ($1, $2) RETURNING id`, name, body).Scan(&id)
		if err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		sub, err := w.client.SubmitTx(ctx, tx, app, task, &taskling.SubmitOptions{
			Header:         jobHeader{UploadID: id},
			ReferenceValue: fmt.Sprintf("upload-%d", id), // names the job in the dashboard and CLI
		})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE webjobs_upload SET submission_id = $1 WHERE id = $2`, sub, id); err != nil {
			return fmt.Errorf("link the job: %w", err)
		}
		return nil
	})
	return id, err
}

// status is an upload's job as the progress page shows it.
type status struct {
	UploadID   int64                     `json:"upload_id"`
	FileName   string                    `json:"file_name"`
	Status     taskling.SubmissionStatus `json:"status"`
	Position   int                       `json:"position"`
	Attempts   int                       `json:"attempts"`
	ItemsDone  int64                     `json:"items_done"`
	ItemsTotal int64                     `json:"items_total"`
	LastError  string                    `json:"last_error,omitempty"`
	Message    string                    `json:"message"`
	Final      bool                      `json:"final"` // the page stops polling
}

// status looks up the upload named in the request's path and its job. Unless code is 200, msg
// says what went wrong (a server error's details go to the log only).
func (w *web) status(r *http.Request) (s status, code int, msg string) {
	idText := r.PathValue("id")
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || id <= 0 {
		return s, http.StatusBadRequest, fmt.Sprintf("bad upload id %q: want a positive integer", idText)
	}
	s.UploadID = id
	var subID int64
	err = w.pool.QueryRow(r.Context(), `SELECT file_name, submission_id FROM webjobs_upload WHERE id = $1`, id).Scan(&s.FileName, &subID)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, http.StatusNotFound, fmt.Sprintf("no upload %d", id)
	}
	if err != nil {
		log.Printf("webjobs: load upload %d: %v", id, err)
		return s, http.StatusInternalServerError, "internal error"
	}
	sub, err := w.client.Submission(r.Context(), subID)
	if errors.Is(err, taskling.ErrNotFound) {
		return s, http.StatusNotFound, fmt.Sprintf("the job of upload %d no longer exists", id)
	}
	if err != nil {
		log.Printf("webjobs: job of upload %d: %v", id, err)
		return s, http.StatusInternalServerError, "internal error"
	}
	s.Status, s.Position, s.Attempts = sub.Status, sub.Position, sub.Attempts
	s.ItemsDone, s.ItemsTotal, s.LastError = sub.ItemsDone, sub.ItemsTotal, sub.LastError
	s.Message, s.Final = describe(sub)
	return s, http.StatusOK, ""
}

// describe says where a job stands, in words for the page.
func describe(sub taskling.Submission) (msg string, final bool) {
	switch sub.Status {
	case taskling.SubmissionWaiting:
		if sub.Attempts > 0 {
			return fmt.Sprintf("Attempt %d failed (%s); waiting to retry… (position %d)", sub.Attempts, sub.LastError, sub.Position), false
		}
		return fmt.Sprintf("Waiting for job to start… (position %d)", sub.Position), false
	case taskling.SubmissionInProgress:
		if sub.ItemsTotal == 0 {
			return "Running…", false
		}
		return fmt.Sprintf("Running, %d %% (%s of %s items)", sub.ItemsDone*100/sub.ItemsTotal, group(sub.ItemsDone), group(sub.ItemsTotal)), false
	case taskling.SubmissionCompleted:
		return fmt.Sprintf("Complete (%s items)", group(sub.ItemsDone)), true
	case taskling.SubmissionDead:
		return fmt.Sprintf("Failed after %d attempts: %s", sub.Attempts, sub.LastError), true
	case taskling.SubmissionCancelled:
		return "Cancelled", true
	}
	return string(sub.Status), false
}

func (w *web) progressPage(rw http.ResponseWriter, r *http.Request) {
	s, code, msg := w.status(r)
	if code != http.StatusOK {
		http.Error(rw, msg, code)
		return
	}
	render(rw, "upload.html", s)
}

// statusJSON is what the progress page polls.
func (w *web) statusJSON(rw http.ResponseWriter, r *http.Request) {
	s, code, msg := w.status(r)
	if code != http.StatusOK {
		writeJSON(rw, code, map[string]string{"error": msg})
		return
	}
	writeJSON(rw, code, s)
}

func writeJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(code)
	if err := json.NewEncoder(rw).Encode(v); err != nil {
		log.Printf("webjobs: write a response: %v", err)
	}
}

func render(rw http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer // so that a failure still gets a clean 500
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		internalError(rw, "render "+name, err)
		return
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = buf.WriteTo(rw)
}

func internalError(rw http.ResponseWriter, doing string, err error) {
	log.Printf("webjobs: %s: %v", doing, err)
	http.Error(rw, "internal error", http.StatusInternalServerError)
}

// fileName keeps the base name of an uploaded file's name, printable and at most 200 bytes.
func fileName(name string) string {
	name = path.Base(strings.ReplaceAll(name, `\`, "/")) // some browsers send a Windows path
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	for len(name) > 200 {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name == "" || name == "." || name == "/" {
		return "upload"
	}
	return name
}

// group writes n with its thousands apart: 1 000 000 (with no-break spaces).
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteRune('\u00a0')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
