package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

func newBlocksCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "blocks", Short: "List a task's or an execution's blocks, show one, force one to run again"}
	var (
		execution    int64
		atRetryLimit bool
		limit        int
	)
	list := &cobra.Command{
		Use:   "list APP/TASK [--at-retry-limit] [--limit N] | list --execution ID",
		Short: "Blocks of a task (newest first) or of an execution, with their latest attempt",
		Long: `List the blocks of APP/TASK, newest first, or those an execution attempted (--execution).
--at-retry-limit keeps the blocks at their retry limit: not completed, not running, with more
attempts than the retry limit of the execution that took them last — no execution with the same
options takes them again (force one with 'taskling blocks force ID').`,
	}
	target := addTaskTarget(list, false)
	list.Args = nil // APP/TASK, --app and --task, or --execution: checked below
	list.RunE = func(cmd *cobra.Command, args []string) error {
		if execution != 0 {
			if len(args) != 0 || target.flagged() {
				return usageErrorf("give either APP/TASK or --execution, not both")
			}
			return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
				if _, err := c.Execution(ctx, execution); err != nil {
					return err
				}
				blocks, err := c.ExecutionBlocks(ctx, execution)
				if err != nil {
					return err
				}
				return e.printBlocks(blocks)
			})
		}
		if len(args) != 1 && !target.flagged() {
			return usageErrorf("want one argument, APP/TASK, or --execution ID")
		}
		if err := target.checkArgs(cmd, args); err != nil {
			return err
		}
		app, task, err := target.resolve(args)
		if err != nil {
			return err
		}
		if limit < 1 || limit > 1000 {
			return usageErrorf("--limit is %d; want 1 to 1000", limit)
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			blocks, err := c.TaskBlocks(ctx, app, task, &taskling.TaskBlocksFilter{AtRetryLimit: atRetryLimit, Limit: limit})
			if err != nil {
				return err
			}
			return e.printBlocks(blocks)
		})
	}
	list.Flags().Int64Var(&execution, "execution", 0, "the blocks this execution attempted")
	list.Flags().BoolVar(&atRetryLimit, "at-retry-limit", false, "only blocks at their retry limit")
	list.Flags().IntVar(&limit, "limit", 50, "how many blocks")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "One block: its range, list or value, status, and every attempt",
		Args:  exactArgs(1, "one argument, a block ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("block", args[0])
			if err != nil {
				return err
			}
			return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
				return e.showBlock(ctx, c, id)
			})
		},
	}
	var by string
	force := &cobra.Command{
		Use:   "force ID [--by NAME]",
		Short: "Make a block run again: the task's next execution asking for blocks of its kind takes it first",
		Long: `Queue block ID to run again, whatever its status: the next execution of its task that asks
for blocks of the same kind takes it first, as a new attempt (a block still running is taken
once it is not). Forcing a block already queued changes nothing.`,
		Args: exactArgs(1, "one argument, a block ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID("block", args[0])
			if err != nil {
				return err
			}
			if err := checkBy(by); err != nil {
				return err
			}
			return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
				if err := e.as(c, by).ForceBlock(ctx, id); err != nil {
					return err
				}
				return e.showBlock(ctx, c, id)
			})
		},
	}
	force.Flags().StringVar(&by, "by", "", byUsage)
	cmd.AddCommand(list, show, force)
	return cmd
}

// blockSpan is what a block covers: its range, its item count or its value.
func blockSpan(b taskling.BlockInfo) string {
	switch {
	case b.FromNumber != nil:
		return fmt.Sprintf("%d–%d", *b.FromNumber, *b.ToNumber)
	case b.FromTime != nil:
		return b.FromTime.UTC().Format(time.RFC3339) + " – " + b.ToTime.UTC().Format(time.RFC3339)
	case b.Kind == "list":
		return fmt.Sprintf("%d items", b.ItemCount)
	case b.ValueError != "":
		return "(unreadable: " + b.ValueError + ")"
	}
	return shorten(string(b.Value), 40)
}

func blockStatusText(b taskling.BlockInfo) string {
	switch {
	case b.ForcePending:
		return string(b.Status) + " (forced)"
	case b.AtRetryLimit:
		return string(b.Status) + " (at retry limit)"
	}
	return string(b.Status)
}

func (e *env) printBlocks(blocks []taskling.BlockInfo) error {
	if e.output == "json" {
		if blocks == nil {
			blocks = []taskling.BlockInfo{}
		}
		return printJSON(e.stdout, httpapi.BlockList{Blocks: blocks})
	}
	if len(blocks) == 0 {
		_, err := fmt.Fprintln(e.stdout, "No blocks.")
		return err
	}
	t := newTable(e.stdout, "ID", "KIND", "SPAN", "STATUS", "ATTEMPTS", "EXECUTION", "CREATED", "MESSAGE")
	for _, b := range blocks {
		t.row(fmt.Sprint(b.ID), b.Kind, terminalSafe(blockSpan(b)), blockStatusText(b), fmt.Sprint(b.Attempts), fmt.Sprint(b.ExecutionID),
			clock(b.CreatedAt), terminalSafe(orDash(shorten(b.Message, 60))))
	}
	return t.flush()
}

func (e *env) showBlock(ctx context.Context, c *taskling.Client, id int64) error {
	b, err := c.Block(ctx, id)
	if err != nil {
		return err
	}
	attempts, err := c.BlockAttempts(ctx, id)
	if err != nil {
		return err
	}
	if e.output == "json" {
		return printJSON(e.stdout, httpapi.BlockDetail{BlockInfo: b, AttemptList: attempts})
	}
	w := e.stdout
	fmt.Fprintf(w, "Block:    %d (%s)\n", b.ID, b.Kind)
	fmt.Fprintf(w, "Span:     %s\n", terminalSafe(blockSpan(b)))
	fmt.Fprintf(w, "Status:   %s\n", blockStatusText(b))
	fmt.Fprintf(w, "Attempts: %d\n", b.Attempts)
	fmt.Fprintf(w, "Created:  %s\n", clock(b.CreatedAt))
	fmt.Fprintln(w)
	t := newTable(w, "ATTEMPT", "EXECUTION", "STATUS", "FORCED", "STARTED", "ENDED", "ITEMS", "MESSAGE")
	for _, a := range attempts {
		started, ended, items := "-", "-", "-"
		if a.StartedAt != nil {
			started = clock(*a.StartedAt)
		}
		if a.EndedAt != nil {
			ended = clock(*a.EndedAt)
		}
		if a.ItemsDone != nil {
			items = fmt.Sprint(*a.ItemsDone)
		}
		t.row(fmt.Sprint(a.Attempt), fmt.Sprint(a.ExecutionID), string(a.Status), fmt.Sprint(a.Forced), started, ended, items,
			terminalSafe(orDash(shorten(a.Message, 60))))
	}
	return t.flush()
}
