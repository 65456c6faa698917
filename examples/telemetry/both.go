package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
)

// both runs a submitter and then a worker process in a database of its own, and prints the
// trace they exported.
func both(ctx context.Context, cfg config) error {
	db, err := pgtest.CreateDatabase(ctx, cfg.dbURL, false)
	if err != nil {
		return err
	}
	defer func() { _ = db.Drop(context.WithoutCancel(ctx)) }()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var args []string
	if cfg.link {
		args = append(args, "-link")
	}
	subOut, subErr, err := child(ctx, self, db.URL, append(args, "-role", "submitter")...)
	if err != nil {
		return fmt.Errorf("submitter: %w\n%s", err, subErr)
	}
	m := regexp.MustCompile(`submission (\d+), trace ([0-9a-f]+)`).FindStringSubmatch(subErr)
	if m == nil {
		return fmt.Errorf("submitter printed no submission:\n%s", subErr)
	}
	fmt.Printf("submitter: submission %s under trace %s\n", m[1], m[2])
	workOut, workErr, err := child(ctx, self, db.URL, append(args, "-role", "worker", "-submission", m[1])...)
	if err != nil {
		return fmt.Errorf("worker: %w\n%s", err, workErr)
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		fmt.Printf("worker: ran it; both sent their spans over OTLP: look up trace %s\n", m[2])
		return nil
	}
	spans, err := readSpans(subOut, "submitter")
	if err != nil {
		return err
	}
	more, err := readSpans(workOut, "worker")
	if err != nil {
		return err
	}
	printTrees(os.Stdout, append(spans, more...))
	return nil
}

// child runs this program again on the database of dbURL and returns its stdout and stderr.
func child(ctx context.Context, self, dbURL string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := childCommand(ctx, self, dbURL, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String(), errOut.String(), err
}

// childCommand is a process of -role both. The database URL, password and all, goes in its
// environment: a command line is anyone's to read (ps).
func childCommand(ctx context.Context, self, dbURL string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), "TASKLING_DATABASE_URL="+dbURL)
	return cmd
}

// span is what the tree needs of a span that stdouttrace printed.
type span struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Links       []struct {
		SpanContext struct{ TraceID, SpanID string }
	}
	StartTime  time.Time
	EndTime    time.Time
	Attributes []struct {
		Key   string
		Value struct{ Value any }
	}
	Status  struct{ Code string }
	process string
}

func (s span) attr(key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return fmt.Sprint(a.Value.Value)
		}
	}
	return ""
}

// readSpans reads the JSON objects stdouttrace wrote, one after another.
func readSpans(out, process string) ([]span, error) {
	dec := json.NewDecoder(bufio.NewReader(strings.NewReader(out)))
	var spans []span
	for {
		var s span
		if err := dec.Decode(&s); err == io.EOF {
			return spans, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s's spans: %w", process, err)
		}
		s.process = process
		spans = append(spans, s)
	}
}

const noParent = "0000000000000000"

// printTrees prints each trace as a tree: a span's children under it, indented, in start order.
func printTrees(w io.Writer, spans []span) {
	sort.Slice(spans, func(i, j int) bool { return spans[i].StartTime.Before(spans[j].StartTime) })
	children := map[string][]span{}
	var roots []span
	known := map[string]bool{}
	for _, s := range spans {
		known[s.SpanContext.SpanID] = true
	}
	for _, s := range spans {
		if s.Parent.SpanID == "" || s.Parent.SpanID == noParent || !known[s.Parent.SpanID] {
			roots = append(roots, s)
			continue
		}
		children[s.Parent.SpanID] = append(children[s.Parent.SpanID], s)
	}
	var walk func(s span, depth int)
	walk = func(s span, depth int) {
		fmt.Fprintf(w, "%-38s %-9s %7.1f ms  %s%s\n", strings.Repeat("  ", depth)+s.Name, s.process,
			float64(s.EndTime.Sub(s.StartTime))/float64(time.Millisecond), describe(s), links(s))
		for _, c := range children[s.SpanContext.SpanID] {
			walk(c, depth+1)
		}
	}
	for _, r := range roots {
		fmt.Fprintf(w, "\ntrace %s\n", r.SpanContext.TraceID)
		walk(r, 0)
	}
}

// describe gives a taskling span's telling attributes.
func describe(s span) string {
	var parts []string
	for _, k := range []string{"taskling.task", "taskling.submission.id", "taskling.attempt", "taskling.fencing_token",
		"taskling.block.id", "taskling.outcome"} {
		if v := s.attr(k); v != "" {
			parts = append(parts, strings.TrimPrefix(k, "taskling.")+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

func links(s span) string {
	var out []string
	for _, l := range s.Links {
		out = append(out, "  ↪ linked to "+l.SpanContext.TraceID+"/"+l.SpanContext.SpanID)
	}
	return strings.Join(out, "")
}
