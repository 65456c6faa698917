package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

func newExecutionsCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "executions", Short: "List a task's executions, show or watch one execution"}
	var last int
	var status string
	list := &cobra.Command{
		Use:   "list APP/TASK [--last N] [--status S]",
		Short: "A task's executions, newest first by start time (granted and blocked)",
		Long: `List a task's last executions, newest first by start time: those granted a slot and
those blocked (refused by a limit, a key's limit or a rate; status blocked).

Execution ids are unique, but each process reserves them ahead, a batch at a time: they jump
(1, 18, 35) and follow start order only within one process. A gap in the ids is not a missing
row, and the list is ordered by start time, not by id.`,
	}
	listTarget := addTaskTarget(list, false)
	list.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, err := listTarget.resolve(args)
		if err != nil {
			return err
		}
		if last < 1 || last > httpapi.MaxPageSize {
			return usageErrorf("--last is %d; want 1 to %d", last, httpapi.MaxPageSize)
		}
		if status != "" {
			if _, err := taskling.ParseStatus(status); err != nil {
				return usageErrorf("--status is %q; want in_progress, completed, failed, blocked or dead", status)
			}
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			page, err := httpapi.LoadExecutions(ctx, c, httpapi.ExecutionsQuery{App: app, Task: task, Status: status, Limit: last})
			if err != nil {
				return err
			}
			if e.output == "json" {
				return printJSON(e.stdout, page)
			}
			return printExecutions(e, page.Executions)
		})
	}
	list.Flags().IntVar(&last, "last", 20, "how many executions")
	list.Flags().StringVar(&status, "status", "", "only this status: in_progress, completed, failed, blocked, dead")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "One execution: status, progress, header and events",
		Args:  exactArgs(1, "one argument, an execution ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("execution", args[0])
			if err != nil {
				return err
			}
			return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
				x, err := httpapi.LoadExecution(ctx, c, id)
				if err != nil {
					return err
				}
				if e.output == "json" {
					return printJSON(e.stdout, x)
				}
				return printExecution(e, x)
			})
		},
	}
	cmd.AddCommand(list, show, newExecutionWatchCommand(e))
	return cmd
}

func printExecutions(e *env, xs []httpapi.Execution) error {
	if len(xs) == 0 {
		_, err := fmt.Fprintln(e.stdout, "No executions.")
		return err
	}
	keyed := slices.ContainsFunc(xs, func(x httpapi.Execution) bool { return x.Key != "" || x.Cost > 1 })
	header := []string{"ID", "STATUS", "STARTED", "HOST", "REFERENCE", "PROGRESS", "FENCE"}
	if keyed {
		header = append(header, "KEY", "COST")
	}
	t := newTable(e.stdout, header...)
	for _, x := range xs {
		fence := "-"
		if x.FencingToken != nil {
			fence = fmt.Sprint(*x.FencingToken)
		}
		cells := []string{fmt.Sprint(x.ID), x.Status, clock(x.StartedAt), x.Host, orDash(shorten(deref(x.ReferenceValue), 60)), progress(x.ItemsDone, x.ItemsTotal), fence}
		if keyed {
			cells = append(cells, fmt.Sprintf("%q", x.Key), fmt.Sprint(x.Cost))
		}
		t.row(cells...)
	}
	return t.flush()
}

func printExecution(e *env, x httpapi.Execution) error {
	w := e.stdout
	fmt.Fprintf(w, "Execution: %d\n", x.ID)
	fmt.Fprintf(w, "Status:    %s\n", x.Status)
	fmt.Fprintf(w, "Host:      %s\n", terminalSafe(x.Host))
	fmt.Fprintf(w, "Started:   %s\n", clock(x.StartedAt))
	if x.CompletedAt != nil {
		fmt.Fprintf(w, "Completed: %s\n", clock(*x.CompletedAt))
	}
	if x.FencingToken != nil {
		fmt.Fprintf(w, "Fence:     %d\n", *x.FencingToken)
	}
	if x.Key != "" || x.Cost > 1 {
		fmt.Fprintf(w, "Key:       %s (cost %d)\n", terminalSafe(fmt.Sprintf("%q", x.Key)), x.Cost)
	}
	fmt.Fprintf(w, "Progress:  %s\n", progress(x.ItemsDone, x.ItemsTotal))
	fmt.Fprintf(w, "Reference: %s\n", terminalSafe(orDash(deref(x.ReferenceValue))))
	if x.SubmissionID != nil && x.Attempt != nil {
		fmt.Fprintf(w, "Attempt:   %d of submission %d\n", *x.Attempt, *x.SubmissionID)
	}
	if x.BlockedReason != nil {
		fmt.Fprintf(w, "Blocked:   %s\n", terminalSafe(*x.BlockedReason))
	}
	if x.ReclaimedAt != nil {
		fmt.Fprintf(w, "Reclaimed: %s\n", clock(*x.ReclaimedAt))
	}
	fmt.Fprintf(w, "Header:    %s\n\n", terminalSafe(storedJSONText(x.Header, deref(x.HeaderError))))
	t := newTable(w, "TIME", "EVENT", "MESSAGE")
	for _, ev := range x.Events {
		t.row(clock(ev.OccurredAt), ev.Type, orDash(deref(ev.Message)))
	}
	return t.flush()
}
