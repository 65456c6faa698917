package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

// newTasksKeysCommand is 'taskling tasks keys': a task's keys, and the operator's overrides of
// named keys' limits.
func newTasksKeysCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "A task's keys: show them, set or clear the operator's override of a key's limit or rate"}
	cmd.AddCommand(newKeysShowCommand(e), newKeysSetCommand(e), newKeysClearCommand(e))
	return cmd
}

// keyTarget is APP/TASK KEY (or --app, --task and KEY).
type keyTarget struct{ *taskTarget }

func addKeyTarget(cmd *cobra.Command) keyTarget {
	t := keyTarget{addTaskTarget(cmd, false)}
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		want := 2
		if t.flagged() {
			want = 1
		}
		if len(args) != want {
			return usageErrorf("%s takes APP/TASK and KEY (or --app, --task and KEY); got %d arguments", cmd.CommandPath(), len(args))
		}
		return nil
	}
	return t
}

func (t keyTarget) resolveKey(args []string) (app, task, key string, err error) {
	key = args[len(args)-1]
	if app, task, err = t.resolve(args[:len(args)-1]); err != nil {
		return "", "", "", err
	}
	if err := taskling.ValidateKey("KEY", key); err != nil {
		return "", "", "", usageErrorf("%w", err)
	}
	return app, task, key, nil
}

func newKeysSetCommand(e *env) *cobra.Command {
	var (
		limit int
		rate  string
		by    string
	)
	cmd := &cobra.Command{
		Use:   "set APP/TASK KEY [--limit N] [--rate R] [--by NAME]",
		Short: "Override a key's limit or rate; the next start on every host obeys it",
		Long: `Store the operator's override of KEY's limit (--limit) or rate (--rate: "5/1m",
"500/1s,burst=50", or "none"), or both: it wins over KeyLimit and KeyRate and over what hosts
declare for named keys, until 'taskling tasks keys clear' (or 'tasks clear'). Raising a limit
admits the key's waiters at once; lowering it never evicts a running holder. The change is
recorded in the task's changes ('tasks show').`,
	}
	target := addKeyTarget(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, key, err := target.resolveKey(args)
		if err != nil {
			return err
		}
		var u taskling.KeySettingsUpdate
		if cmd.Flags().Changed("limit") {
			if limit < 1 || limit > taskling.MaxConcurrencyLimit {
				return usageErrorf("--limit is %d; want 1 to %d", limit, taskling.MaxConcurrencyLimit)
			}
			u.Limit = &limit
		}
		if cmd.Flags().Changed("rate") {
			r, err := rateFlag("rate", rate)
			if err != nil {
				return err
			}
			u.Rate = &r
		}
		if u.Limit == nil && u.Rate == nil {
			return usageErrorf("tasks keys set needs --limit or --rate")
		}
		if err := checkBy(by); err != nil {
			return err
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			if err := e.as(c, by).UpdateKeySettings(ctx, app, task, key, u); err != nil {
				return err
			}
			return e.showKeys(ctx, c, app, task)
		})
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "the key's limit: 1 to 10000")
	cmd.Flags().StringVar(&rate, "rate", "", `the key's rate: "5/1m", "500/1s,burst=50", or "none"`)
	cmd.Flags().StringVar(&by, "by", "", byUsage)
	return cmd
}

func newKeysClearCommand(e *env) *cobra.Command {
	var by string
	cmd := &cobra.Command{
		Use:   "clear APP/TASK KEY [--by NAME]",
		Short: "Remove the operator's overrides of a key: it returns to its declared limit and rate",
	}
	target := addKeyTarget(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, key, err := target.resolveKey(args)
		if err != nil {
			return err
		}
		if err := checkBy(by); err != nil {
			return err
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			if _, err := httpapi.LoadTask(ctx, c, app, task); err != nil {
				return err
			}
			if err := e.as(c, by).ClearKeyOverrides(ctx, app, task, key); err != nil {
				return err
			}
			return e.showKeys(ctx, c, app, task)
		})
	}
	cmd.Flags().StringVar(&by, "by", "", byUsage)
	return cmd
}

func newKeysShowCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show APP/TASK",
		Short: "The task's busiest and named keys: holders, cost in use, starts waiting for a slot, submissions queued, limit, rate, their sources and the next allowed start",
	}
	target := addTaskTarget(cmd, false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, err := target.resolve(args)
		if err != nil {
			return err
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			return e.showKeys(ctx, c, app, task)
		})
	}
	return cmd
}

func (e *env) showKeys(ctx context.Context, c *taskling.Client, app, task string) error {
	d, err := httpapi.LoadTask(ctx, c, app, task)
	if err != nil {
		return err
	}
	if e.output == "json" {
		return printJSON(e.stdout, struct {
			Keys  []httpapi.Key `json:"keys"`
			Total int           `json:"keys_total"`
		}{d.Keys, d.KeysTotal})
	}
	return printKeys(e.stdout, d)
}

// printKeys prints a task's keys as a table (nothing for a task without keys).
func printKeys(w io.Writer, d httpapi.TaskDetail) error {
	if len(d.Keys) == 0 {
		_, err := fmt.Fprintln(w, "No keys in use, waiting, queued or named.")
		return err
	}
	t := newTable(w, "KEY", "HOLDERS", "COST IN USE", "WAITING FOR SLOT", "SUBMISSIONS QUEUED", "LIMIT", "SOURCE", "RATE", "RATE SOURCE", "NEXT START")
	for _, k := range d.Keys {
		limit := "none"
		if k.Limit != nil {
			limit = fmt.Sprint(*k.Limit)
		}
		name := terminalSafe(fmt.Sprintf("%q", k.Key))
		t.row(name, fmt.Sprint(k.Holders), fmt.Sprint(k.CostInUse), fmt.Sprint(k.Waiting), fmt.Sprint(k.QueuedSubmissions), limit, k.LimitSource,
			rateText(k.Rate), k.RateSource, nextText(k.NextAllowedSeconds, k.NextAllowed))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if d.KeysTotal > len(d.Keys) {
		_, err := fmt.Fprintf(w, "(%d of %d keys shown)\n", len(d.Keys), d.KeysTotal)
		return err
	}
	return nil
}
