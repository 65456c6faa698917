package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// as returns the operator changes of c made from the command line: the task's audit trail records
// as their principal (and by) --by, else $USER@host (the host being TASKLING_HOST_NAME or the
// machine's name).
func (e *env) as(c *taskling.Client, by string) *taskling.Operations {
	return c.As(taskling.Operator{Name: e.operator(by)})
}

func (e *env) operator(by string) string {
	if by != "" {
		return by
	}
	host := e.getenv("TASKLING_HOST_NAME")
	if host == "" {
		host, _ = os.Hostname()
	}
	if user := e.getenv("USER"); user != "" {
		return user + "@" + host
	}
	return host
}

const byUsage = "who makes the change, recorded as its principal in the task's changes (default $USER@host)"

func newTasksRetireCommand(e *env, retire bool) *cobra.Command {
	var scheduleOnly bool
	var by string
	cmd := &cobra.Command{
		Use:   "retire APP/TASK [--schedule-only] [--by NAME]",
		Short: "Retire a task (or only its schedule): its starts are refused, it leaves the lists",
		Long: `Retire a task: every host refuses its starts from the next one on (ErrTaskRetired), its
schedule claims no instant, and it leaves 'tasks list' (--status retired lists it). Running
executions complete as usual; its history stays readable and is deleted by its keep settings,
the latest execution included. 'tasks unretire' brings it back.
With --schedule-only, only its schedule is retired: no host claims its instants, while the task
can still be started.`,
	}
	target := addTaskTarget(cmd, false)
	change := func(op *taskling.Operations) func(context.Context, string, string) error {
		if scheduleOnly {
			return op.RetireSchedule
		}
		return op.RetireTask
	}
	if !retire {
		cmd.Use = "unretire APP/TASK [--schedule-only] [--by NAME]"
		cmd.Short = "Unretire a task (or only its schedule): its starts are served again"
		cmd.Long = `End a task's retirement: its starts are served again, with the overrides it had, and it is
listed again. Its schedule (if it has one) claims instants from now on: those that came due while
it was retired are recorded as retired in its schedule history, not run.
With --schedule-only, only its schedule's retirement ends.`
		change = func(op *taskling.Operations) func(context.Context, string, string) error {
			if scheduleOnly {
				return op.UnretireSchedule
			}
			return op.UnretireTask
		}
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, err := target.resolve(args)
		if err != nil {
			return err
		}
		if err := checkBy(by); err != nil {
			return err
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			if err := change(e.as(c, by))(ctx, app, task); err != nil {
				return err
			}
			return e.showTask(ctx, c, app, task)
		})
	}
	cmd.Flags().BoolVar(&scheduleOnly, "schedule-only", false, "only the task's schedule")
	cmd.Flags().StringVar(&by, "by", "", byUsage)
	return cmd
}

// checkBy refuses a --by that the library would refuse (taskling.ValidateOperator).
func checkBy(by string) error {
	if err := taskling.ValidateOperator("--by", by); err != nil {
		return usageErrorf("%w", err)
	}
	return nil
}

func newTasksChangesCommand(e *env) *cobra.Command {
	var limit int
	var before int64
	cmd := &cobra.Command{
		Use:   "changes APP/TASK [--limit N] [--before ID]",
		Short: "The task's operator changes, newest first: when, who (principal and by), which field, old → new",
	}
	target := addTaskTarget(cmd, false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, err := target.resolve(args)
		if err != nil {
			return err
		}
		if limit < 1 || limit > taskling.MaxChangesPage {
			return usageErrorf("--limit is %d; want 1 to %d", limit, taskling.MaxChangesPage)
		}
		if before < 0 {
			return usageErrorf("--before is %d; want a change id", before)
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			page, err := httpapi.LoadChanges(ctx, c, httpapi.ChangesQuery{App: app, Task: task, Before: before, Limit: limit})
			if err != nil {
				return err
			}
			if e.output == "json" {
				return printJSON(e.stdout, page)
			}
			if err := printChanges(e.stdout, page.Changes); err != nil {
				return err
			}
			if page.NextBefore != nil {
				_, err = fmt.Fprintf(e.stdout, "\nolder changes: --before %d\n", *page.NextBefore)
			}
			return err
		})
	}
	cmd.Flags().IntVar(&limit, "limit", taskling.DefaultChangesPage, fmt.Sprintf("changes per page, 1 to %d", taskling.MaxChangesPage))
	cmd.Flags().Int64Var(&before, "before", 0, "the changes older than this change id (the previous page's last line says it)")
	return cmd
}

// printChanges prints changes as a table, or says there are none.
func printChanges(w io.Writer, changes []httpapi.Change) error {
	if len(changes) == 0 {
		_, err := fmt.Fprintln(w, "No operator change yet.")
		return err
	}
	t := newTable(w, "CHANGED", "PRINCIPAL", "BY", "FIELD", "OLD → NEW")
	for _, c := range changes {
		t.row(clock(c.At), c.PrincipalText(), c.By, c.Field, c.OldText()+" → "+c.NewText())
	}
	return t.flush()
}
