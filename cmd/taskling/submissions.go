package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// submitFlags names the CLI flag of each field of the API's submit body, so that one validation
// (httpapi.SubmitRequest) serves both with the right name in the error.
var submitFlags = map[string]string{"header": "--header", "reference_value": "--reference", "priority": "--priority", "max_attempts": "--max-attempts",
	"key": "--key", "cost": "--cost"}

func newSubmitCommand(e *env) *cobra.Command {
	var (
		header      string
		reference   string
		priority    int
		maxAttempts int
		key         string
		cost        int
	)
	cmd := &cobra.Command{
		Use:   "submit APP/TASK [--header JSON] [--reference R] [--priority N] [--max-attempts N] [--key K] [--cost N]",
		Short: "Queue a run of a task for the hosts running Work; prints its id",
		Long: `Queue a run of APP/TASK and print its submission id; a host running client.Work for the task
takes it (highest priority first, oldest first within a priority) and runs it in a slot of the
task. The task is created if it does not exist yet.

--reference makes it idempotent: submitting the same reference again prints the first
submission's id and queues nothing. An attempt that fails, or whose host dies, is retried until
--max-attempts attempts were made (default 3, at most 1000); the submission is then dead.
Follow it with 'taskling submissions show ID'.`,
	}
	target := addTaskTarget(cmd, false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, err := target.resolve(args)
		if err != nil {
			return err
		}
		var req httpapi.SubmitRequest
		flags := cmd.Flags()
		if flags.Changed("header") {
			if !json.Valid([]byte(header)) {
				return usageErrorf("--header is not JSON: %s", strconv.Quote(header))
			}
			req.Header = json.RawMessage(header)
		}
		if flags.Changed("reference") {
			req.ReferenceValue = &reference
		}
		if flags.Changed("priority") {
			req.Priority = &priority
		}
		if flags.Changed("max-attempts") {
			req.MaxAttempts = &maxAttempts
		}
		if flags.Changed("key") {
			req.Key = &key
		}
		if flags.Changed("cost") {
			req.Cost = &cost
		}
		opts, err := req.Options()
		if err != nil {
			var fe *httpapi.FieldError
			if errors.As(err, &fe) {
				return usageErrorf("%s %s", submitFlags[fe.Field], fe.Message)
			}
			return usageErrorf("%w", err)
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			id, err := c.Submit(ctx, app, task, opts)
			if err != nil {
				return err
			}
			if e.output == "json" {
				return printJSON(e.stdout, httpapi.SubmitResponse{ID: id})
			}
			_, err = fmt.Fprintln(e.stdout, id)
			return err
		})
	}
	cmd.Flags().StringVar(&header, "header", "", `JSON handed to every attempt (Execution.Header), e.g. '{"day": "2026-11-21"}'`)
	cmd.Flags().StringVar(&reference, "reference", "", "reference value: a second submit with the same one queues nothing")
	cmd.Flags().IntVar(&priority, "priority", 0, "higher runs first")
	cmd.Flags().IntVar(&maxAttempts, "max-attempts", taskling.DefaultMaxAttempts, "attempts before it is dead: 1 to 1000")
	cmd.Flags().StringVar(&key, "key", "", "the key its attempts run under (a tenant): its key's limit bounds them (docs/keys.md)")
	cmd.Flags().IntVar(&cost, "cost", 1, "the task's slots each attempt takes")
	return cmd
}

func newSubmissionsCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "submissions", Short: "List a task's submissions, show, watch or cancel one"}
	var (
		status string
		limit  int
	)
	list := &cobra.Command{
		Use:   "list APP/TASK [--status S] [--limit N]",
		Short: "A task's submissions: newest first, or the waiting ones in queue order",
	}
	listTarget := addTaskTarget(list, false)
	list.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, err := listTarget.resolve(args)
		if err != nil {
			return err
		}
		if limit < 1 || limit > httpapi.MaxSubmissionsPage {
			return usageErrorf("--limit is %d; want 1 to %d", limit, httpapi.MaxSubmissionsPage)
		}
		if status != "" {
			if _, err := taskling.ParseSubmissionStatus(status); err != nil {
				return usageErrorf("--status is %q; want waiting, in_progress, completed, dead or cancelled", status)
			}
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			page, err := httpapi.LoadSubmissions(ctx, c, httpapi.SubmissionsQuery{App: app, Task: task, Status: status, Limit: limit})
			if err != nil {
				return err
			}
			if e.output == "json" {
				return printJSON(e.stdout, page)
			}
			return printSubmissions(e, page.Submissions)
		})
	}
	list.Flags().StringVar(&status, "status", "", "only this status: waiting, in_progress, completed, dead, cancelled")
	list.Flags().IntVar(&limit, "limit", 20, "how many submissions")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "One submission: status, queue position, attempts, progress, last error, executions",
		Args:  exactArgs(1, "one argument, a submission ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("submission", args[0])
			if err != nil {
				return err
			}
			return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
				return e.showSubmission(ctx, c, id)
			})
		},
	}
	var reason, by string
	cancel := &cobra.Command{
		Use:   "cancel ID [--reason R] [--by NAME]",
		Short: "Cancel a submission: a waiting one never runs; a running one's context is cancelled",
		Long: `Cancel a submission. A waiting one is cancelled at once and never runs. A running one's
Execution.Context() is cancelled (with ErrSubmissionCancelled); it becomes cancelled when its
attempt returns, or completed if the attempt completes anyway. A submission that already
completed, died or was cancelled cannot be cancelled (exit 1).`,
		Args: exactArgs(1, "one argument, a submission ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("submission", args[0])
			if err != nil {
				return err
			}
			if err := (httpapi.CancelRequest{Reason: reason}).Validate(); err != nil {
				var fe *httpapi.FieldError
				if errors.As(err, &fe) {
					return usageErrorf("--reason %s", fe.Message)
				}
				return usageErrorf("%w", err)
			}
			if err := checkBy(by); err != nil {
				return err
			}
			return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
				if _, err := e.as(c, by).CancelSubmission(ctx, id, reason); err != nil {
					return err
				}
				return e.showSubmission(ctx, c, id)
			})
		},
	}
	cancel.Flags().StringVar(&reason, "reason", "", "why, kept with the submission and given to a running attempt")
	cancel.Flags().StringVar(&by, "by", "", byUsage)
	cmd.AddCommand(list, show, newSubmissionWatchCommand(e), cancel)
	return cmd
}

// parseID reads a positive id of a kind ("submission", "block", "execution") from an argument.
func parseID(kind, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, usageErrorf("%s ID %q is not a positive integer", kind, s)
	}
	return id, nil
}

func printSubmissions(e *env, subs []taskling.Submission) error {
	if len(subs) == 0 {
		_, err := fmt.Fprintln(e.stdout, "No submissions.")
		return err
	}
	keyed := slices.ContainsFunc(subs, func(s taskling.Submission) bool { return s.Key != "" || s.Cost > 1 })
	header := []string{"ID", "STATUS", "POSITION", "PRIORITY", "ATTEMPTS", "PROGRESS", "REFERENCE", "SUBMITTED", "LAST ERROR"}
	if keyed {
		header = append(header, "KEY", "COST")
	}
	t := newTable(e.stdout, header...)
	for _, s := range subs {
		position := "-"
		if s.Position > 0 {
			position = fmt.Sprint(s.Position)
		}
		cells := []string{fmt.Sprint(s.ID), submissionStatusText(s), position, fmt.Sprint(s.Priority), fmt.Sprintf("%d/%d", s.Attempts, s.MaxAttempts),
			submissionProgress(s), orDash(shorten(s.ReferenceValue, 60)), clock(s.SubmittedAt), orDash(shorten(s.LastError, 60))}
		if keyed {
			cells = append(cells, fmt.Sprintf("%q", s.Key), fmt.Sprint(s.Cost))
		}
		t.row(cells...)
	}
	return t.flush()
}

// submissionStatusText is the status, marking a running submission whose cancel was asked.
func submissionStatusText(s taskling.Submission) string {
	if s.CancelRequested && s.Status == taskling.SubmissionInProgress {
		return string(s.Status) + " (cancel requested)"
	}
	return string(s.Status)
}

func submissionProgress(s taskling.Submission) string {
	if s.ItemsDone == 0 && s.ItemsTotal == 0 {
		return "-"
	}
	return progress(&s.ItemsDone, &s.ItemsTotal)
}

// shorten cuts s to at most n characters, marking the cut.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func (e *env) showSubmission(ctx context.Context, c *taskling.Client, id int64) error {
	s, err := httpapi.LoadSubmission(ctx, c, id)
	if err != nil {
		return err
	}
	if e.output == "json" {
		return printJSON(e.stdout, s)
	}
	w := e.stdout
	fmt.Fprintf(w, "Submission: %d\n", s.ID)
	fmt.Fprintf(w, "Task:       %s\n", terminalSafe(s.Application+"/"+s.Task))
	fmt.Fprintf(w, "Status:     %s\n", submissionStatusText(s.Submission))
	if s.Position > 0 {
		fmt.Fprintf(w, "Position:   %d\n", s.Position)
	}
	fmt.Fprintf(w, "Priority:   %d\n", s.Priority)
	fmt.Fprintf(w, "Attempts:   %d/%d\n", s.Attempts, s.MaxAttempts)
	fmt.Fprintf(w, "Progress:   %s\n", submissionProgress(s.Submission))
	fmt.Fprintf(w, "Reference:  %s\n", terminalSafe(orDash(s.ReferenceValue)))
	fmt.Fprintf(w, "Header:     %s\n", terminalSafe(storedJSONText(s.Header, s.HeaderError)))
	fmt.Fprintf(w, "Submitted:  %s\n", clock(s.SubmittedAt))
	fmt.Fprintf(w, "Updated:    %s\n", clock(s.UpdatedAt))
	if s.FinishedAt != nil {
		fmt.Fprintf(w, "Finished:   %s\n", clock(*s.FinishedAt))
	}
	if s.CancelRequested {
		fmt.Fprintf(w, "Cancel:     %s\n", terminalSafe(orDash(s.CancelReason)))
	}
	fmt.Fprintf(w, "Last error: %s\n", terminalSafe(orDash(s.LastError)))
	if !s.Trace.IsZero() {
		fmt.Fprintf(w, "Trace:      %s\n", terminalSafe(s.Trace.Traceparent))
	}
	executions := make([]string, len(s.AttemptsExecutions))
	for i, x := range s.AttemptsExecutions {
		executions[i] = fmt.Sprintf("#%d", x)
	}
	_, err = fmt.Fprintf(w, "Executions: %s\n", orDash(strings.Join(executions, " ")))
	return err
}
