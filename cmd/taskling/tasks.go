package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/internal/httpapi"
	"github.com/taskling-go/taskling/taskling"
)

func newTasksCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "tasks", Short: "List tasks, show their slots, set or clear operator overrides, retire them"}
	var clearBy string
	clear := &cobra.Command{
		Use:   "clear APP/TASK [--by NAME]",
		Short: "Remove every operator override: the task returns to its declared settings",
	}
	clearTarget := addTaskTarget(clear, false)
	clear.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, err := clearTarget.resolve(args)
		if err != nil {
			return err
		}
		if err := checkBy(clearBy); err != nil {
			return err
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			if _, err := httpapi.LoadTask(ctx, c, app, task); err != nil {
				return err
			}
			if err := e.as(c, clearBy).ClearOverrides(ctx, app, task); err != nil {
				return err
			}
			return e.showTask(ctx, c, app, task)
		})
	}
	clear.Flags().StringVar(&clearBy, "by", "", byUsage)
	show := &cobra.Command{
		Use:   "show APP/TASK",
		Short: "One task, each slot (holder execution, host, heartbeat age, alive/dead, fence) and its last changes",
	}
	showTarget := addTaskTarget(show, false)
	show.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, err := showTarget.resolve(args)
		if err != nil {
			return err
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			return e.showTask(ctx, c, app, task)
		})
	}
	cmd.AddCommand(newTasksListCommand(e), show, newTasksSetCommand(e), clear, newTasksRetireCommand(e, true), newTasksRetireCommand(e, false), newTasksChangesCommand(e),
		newTasksKeysCommand(e))
	return cmd
}

func newTasksListCommand(e *env) *cobra.Command {
	var f struct{ q, app, status, sort, cursor string }
	var limit int
	cmd := &cobra.Command{
		Use:   "list [--q TEXT] [--app APP] [--status busy|at_limit|waiting|idle|retired] [--sort name|busy] [--limit N] [--cursor C]",
		Short: "Tasks: limit in force and its source, slots used/total, starts waiting for a slot, submissions queued, last execution",
		Long: `List the tasks, a page at a time (--limit, 50 by default), filtered and sorted like
GET /api/v1/tasks: --q keeps the tasks whose APP/TASK contains the text (ignoring case), --app
one application's, --status the busy (a slot in use), at_limit (every slot in use), waiting
(starts queued for a slot) or idle ones, or the retired ones, which no other listing shows;
--sort busy puts the tasks at their limit first, then the busiest. When more tasks follow, the
last line gives the --cursor that lists them.

WAITING FOR SLOT counts the starts waiting for a slot (WaitForSlot starts, Work's workers among
them); SUBMISSIONS QUEUED the submissions waiting to start, which no start counts until a worker
claims one (its start then waits for a slot and is counted in both). A task marked (internal),
"APP/TASK [critical section]", is the critical section of APP/TASK: a mutex its executions take
one at a time, which taskling keeps as a task of its own (docs/blocks.md).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			values := map[string]string{"q": f.q, "app": f.app, "status": f.status, "sort": f.sort, "limit": fmt.Sprint(limit), "cursor": f.cursor}
			q, field, err := httpapi.ParseTasksQuery(func(k string) string { return values[k] })
			if err != nil {
				return usageErrorf("--%s: %v", field, err)
			}
			return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
				list, err := httpapi.LoadTasks(ctx, c, q)
				if errors.Is(err, taskling.ErrInvalidArgument) && q.Cursor != "" {
					return usageErrorf("--cursor: %v", err)
				}
				if err != nil {
					return err
				}
				if e.output == "json" {
					return printJSON(e.stdout, list)
				}
				if err := printTasks(e, list.Tasks); err != nil {
					return err
				}
				if list.NextCursor != nil {
					_, err = fmt.Fprintf(e.stdout, "\n%d of %d tasks shown; the next ones: --cursor %s\n", len(list.Tasks), list.Total, *list.NextCursor)
				}
				return err
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.q, "q", "", "keep the tasks whose APP/TASK contains this text, ignoring case")
	fl.StringVar(&f.app, "app", "", "keep this application's tasks")
	fl.StringVar(&f.status, "status", "", "keep the tasks that are busy, at_limit, waiting or idle; or list the retired ones")
	fl.StringVar(&f.sort, "sort", "name", "order: name, or busy (at the limit first, then the most slots used, then the most waiting)")
	fl.IntVar(&limit, "limit", httpapi.DefaultTasksPage, fmt.Sprintf("tasks per page, 1 to %d", httpapi.MaxTasksPage))
	fl.StringVar(&f.cursor, "cursor", "", "list the page after the one that printed this cursor")
	return cmd
}

func newTasksSetCommand(e *env) *cobra.Command {
	var (
		limit     int
		keyLimit  int
		rates     [2]string
		disable   bool
		enable    bool
		threshold time.Duration
		keeps     [3]string
		by        string
	)
	cmd := &cobra.Command{
		Use:   "set APP/TASK [--limit N] [--key-limit N] [--rate R] [--key-rate R] [--disable | --enable] [--keep-alive-threshold D] [--keep-completed K] [--keep-failed K] [--keep-blocked K]",
		Short: "Store operator overrides; the next start on every host obeys them",
		Long: `Store operator overrides in the task's row. They win over every host's declared settings
until 'taskling tasks clear'; the next start on every host obeys them. Lowering the limit
never evicts a running holder: no new slot is granted until fewer than N hold one.
The task's row is created if no execution of it ever started, so a limit can be set before
the first run. Each override changed is recorded in the task's changes ('tasks show').`,
	}
	target := addTaskTarget(cmd, false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		app, task, err := target.resolve(args)
		if err != nil {
			return err
		}
		var u taskling.SettingsUpdate
		flags := cmd.Flags()
		if flags.Changed("limit") {
			if limit != -1 && (limit < 1 || limit > taskling.MaxConcurrencyLimit) {
				return usageErrorf("--limit is %d; want -1 (unlimited) or 1 to %d", limit, taskling.MaxConcurrencyLimit)
			}
			u.ConcurrencyLimit = &limit
		}
		if flags.Changed("key-limit") {
			if keyLimit < 0 || keyLimit > taskling.MaxConcurrencyLimit {
				return usageErrorf("--key-limit is %d; want 0 (no key limit) or 1 to %d", keyLimit, taskling.MaxConcurrencyLimit)
			}
			u.KeyLimit = &keyLimit
		}
		for i, dst := range []**taskling.Rate{&u.Rate, &u.KeyRate} {
			name := [...]string{"rate", "key-rate"}[i]
			if flags.Changed(name) {
				r, err := rateFlag(name, rates[i])
				if err != nil {
					return err
				}
				*dst = &r
			}
		}
		if disable && enable {
			return usageErrorf("--disable and --enable exclude each other")
		}
		if disable || enable {
			on := enable
			u.Enabled = &on
		}
		if flags.Changed("keep-alive-threshold") {
			if threshold < taskling.MinThreshold || threshold > taskling.MaxThreshold {
				return usageErrorf("--keep-alive-threshold is %s; want at least %s and at most %s", threshold, taskling.MinThreshold, taskling.MaxThreshold)
			}
			u.KeepAliveDeathThreshold = &threshold
		}
		for i, dst := range []**time.Duration{&u.KeepCompleted, &u.KeepFailed, &u.KeepBlocked} {
			name := [...]string{"keep-completed", "keep-failed", "keep-blocked"}[i]
			if !flags.Changed(name) {
				continue
			}
			d, err := taskling.ParseKeep(keeps[i])
			if err != nil {
				return usageErrorf("--%s: %v", name, err)
			}
			*dst = &d
		}
		if u == (taskling.SettingsUpdate{}) {
			return usageErrorf("tasks set needs at least one of --limit, --key-limit, --rate, --key-rate, --disable, --enable, --keep-alive-threshold, --keep-completed, --keep-failed, --keep-blocked")
		}
		if err := checkBy(by); err != nil {
			return err
		}
		return e.withClient(cmd.Context(), func(ctx context.Context, c *taskling.Client) error {
			if err := e.as(c, by).UpdateTaskSettings(ctx, app, task, u); err != nil {
				return err
			}
			return e.showTask(ctx, c, app, task)
		})
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "concurrency limit: -1 unlimited, or 1 to 10000")
	cmd.Flags().IntVar(&keyLimit, "key-limit", 0, "every key's limit (KeyLimit): 0 for none, or 1 to 10000; 'tasks keys set' overrides one key")
	cmd.Flags().StringVar(&rates[0], "rate", "", `the task's rate (Rate): "30/1m", "500/1s,burst=50", or "none"`)
	cmd.Flags().StringVar(&rates[1], "key-rate", "", `every key's rate (KeyRate), as --rate; 'tasks keys set --rate' overrides one key`)
	cmd.Flags().BoolVar(&disable, "disable", false, "disable the task: starts return ErrTaskDisabled")
	cmd.Flags().BoolVar(&enable, "enable", false, "enable the task, whatever its declared settings")
	cmd.Flags().DurationVar(&threshold, "keep-alive-threshold", 0, "KeepAliveDeathThreshold: a holder silent this long is dead (e.g. 30s)")
	cmd.Flags().StringVar(&keeps[0], "keep-completed", "", `KeepCompleted: keep completed executions this long ("14d", "36h" or "forever")`)
	cmd.Flags().StringVar(&keeps[1], "keep-failed", "", "KeepFailed: keep failed and dead executions this long")
	cmd.Flags().StringVar(&keeps[2], "keep-blocked", "", "KeepBlocked: keep blocked starts (refused by a limit or a rate) this long")
	cmd.Flags().StringVar(&by, "by", "", byUsage)
	return cmd
}

func printTasks(e *env, tasks []httpapi.Task) error {
	if len(tasks) == 0 {
		_, err := fmt.Fprintln(e.stdout, "No tasks.")
		return err
	}
	t := newTable(e.stdout, "TASK", "LIMIT", "SOURCE", "SLOTS", "WAITING FOR SLOT", "SUBMISSIONS QUEUED", "ENABLED", "LAST EXECUTION")
	for _, task := range tasks {
		slots := fmt.Sprintf("%d/%s", task.SlotsUsed, limitText(task.SlotsTotal))
		if task.SlotsRetiring > 0 {
			slots += fmt.Sprintf(" (%d retiring)", task.SlotsRetiring)
		}
		last := "-"
		if l := task.LastExecution; l != nil {
			last = fmt.Sprintf("#%d %s %s", l.ID, l.Status, clock(l.StartedAt))
		}
		source := task.LimitSource
		if task.Disagreement != nil && source == "declared" {
			source = "declared (hosts disagree)"
		}
		name := task.Application + "/" + task.Task
		if task.CriticalSectionOf != nil {
			name += " (internal)"
		}
		t.row(name, limitText(task.Limit), source, slots, fmt.Sprint(task.Waiting), fmt.Sprint(task.QueuedSubmissions), enabledText(task), last)
	}
	return t.flush()
}

// retentionText: the keep settings in force, which an operator overrides, and the cleanups.
func retentionText(r httpapi.Retention) string {
	s := fmt.Sprintf("completed %s, failed %s, blocked %s", r.KeepCompleted, r.KeepFailed, r.KeepBlocked)
	if len(r.Overridden) > 0 {
		s += " (override: " + strings.Join(r.Overridden, ", ") + ")"
	}
	if r.LastCleaned != nil {
		s += fmt.Sprintf("; last cleaned %s, %d rows deleted in all", clock(*r.LastCleaned), r.RowsDeleted)
	} else {
		s += "; never cleaned"
	}
	if r.CleaningBy != nil {
		s += "; being cleaned by " + *r.CleaningBy
	}
	return s
}

// enabledText: whether the task's starts are served, and where that comes from.
func enabledText(t httpapi.Task) string {
	yes := "no"
	if t.EnabledNow {
		yes = "yes"
	}
	switch {
	case t.Retired != nil:
		return "no (retired)"
	case t.EnabledSource == "none":
		return yes + " (default)"
	}
	return yes + " (" + t.EnabledSource + ")"
}

func (e *env) showTask(ctx context.Context, c *taskling.Client, app, task string) error {
	d, err := httpapi.LoadTask(ctx, c, app, task)
	if err != nil {
		return err
	}
	if e.output == "json" {
		return printJSON(e.stdout, d)
	}
	w := e.stdout
	declared := "-"
	if d.DeclaredLimit != nil {
		declared = limitText(*d.DeclaredLimit) + " by " + deref(d.DeclaredBy)
	}
	fmt.Fprintf(w, "Task:      %s\n", terminalSafe(d.Application+"/"+d.Task.Task))
	if of := d.CriticalSectionOf; of != nil {
		fmt.Fprintf(w, "Internal:  the critical section of %s, a mutex its executions take one at a time\n", terminalSafe(d.Application+"/"+*of))
	}
	fmt.Fprintf(w, "Limit:     %s (%s)\n", limitText(d.Limit), d.LimitSource)
	if g := d.Disagreement; g != nil {
		declared += fmt.Sprintf("; %s declared %s until %s (hosts disagree: each grant obeys its requester's)", g.OtherHost, limitText(g.OtherLimit), clock(g.At))
	}
	fmt.Fprintf(w, "Declared:  %s\n", terminalSafe(declared))
	fmt.Fprintf(w, "Enabled:   %s\n", enabledText(d.Task))
	if d.SettingsError != nil {
		fmt.Fprintf(w, "Settings:  INVALID, every start fails: %s\n", terminalSafe(*d.SettingsError))
	}
	fmt.Fprintf(w, "Slots:     %d/%s in use\n", d.SlotsUsed, limitText(d.SlotsTotal))
	if d.Waiting > 0 && d.OldestWaitSince != nil {
		fmt.Fprintf(w, "Waiting:   %s for a slot (oldest since %s)\n", plural(d.Waiting, "start"), d.OldestWaitSince.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintf(w, "Waiting:   %s for a slot\n", plural(d.Waiting, "start"))
	}
	fmt.Fprintf(w, "Queued:    %s waiting to start\n", plural(d.QueuedSubmissions, "submission"))
	if d.KeyLimitSource != "none" || d.KeysTotal > 0 {
		keyLimit := "none"
		if d.KeyLimit != nil {
			keyLimit = fmt.Sprint(*d.KeyLimit)
		}
		fmt.Fprintf(w, "Key limit: %s (%s); %d keys with starts waiting for a slot\n", keyLimit, d.KeyLimitSource, d.KeysWaiting)
	}
	if d.RateSource != "none" || d.KeyRateSource != "none" {
		fmt.Fprintf(w, "Rate:      %s (%s); next start allowed %s\n", rateText(d.Rate), d.RateSource, nextText(d.NextAllowedSeconds, d.NextAllowed))
		fmt.Fprintf(w, "Key rate:  %s (%s)\n", rateText(d.KeyRate), d.KeyRateSource)
	}
	fmt.Fprintf(w, "Fence:     %d\n", d.Fence)
	if r := d.Retired; r != nil {
		fmt.Fprintf(w, "Retired:   by %s at %s (starts are refused)\n", terminalSafe(r.By), clock(r.At))
	}
	if d.HasSchedule {
		schedule := "active"
		if r := d.ScheduleRetired; r != nil {
			schedule = fmt.Sprintf("retired by %s at %s", terminalSafe(r.By), clock(r.At))
		} else if d.Retired != nil {
			schedule = "dormant while the task is retired"
		}
		fmt.Fprintf(w, "Schedule:  %s\n", schedule)
	}
	if o := d.Overrides.KeepAliveDeathThreshold; o != nil {
		fmt.Fprintf(w, "Keep-alive threshold: %s (override)\n", *o)
	}
	fmt.Fprintf(w, "Retention: %s\n", terminalSafe(retentionText(d.Retention)))
	fmt.Fprintln(w)
	if err := printSlots(w, d.Slots); err != nil {
		return err
	}
	if d.KeysTotal > 0 {
		fmt.Fprintln(w)
		if err := printKeys(w, d); err != nil {
			return err
		}
	}
	changes, err := httpapi.LoadChanges(ctx, c, httpapi.ChangesQuery{App: app, Task: task, Limit: changesShown})
	if err != nil || len(changes.Changes) == 0 {
		return err
	}
	fmt.Fprintln(w)
	return printChanges(w, changes.Changes)
}

// rateFlag reads a rate flag's value ("30/1m", "none").
func rateFlag(name, value string) (taskling.Rate, error) {
	if strings.TrimSpace(value) == "" {
		return taskling.Rate{}, usageErrorf(`--%s is empty; want a rate like "30/1m" or "500/1s,burst=50", or "none"`, name)
	}
	r, err := taskling.ParseRate(value)
	if err != nil {
		return r, usageErrorf("--%s: %v", name, err)
	}
	return r, nil
}

// rateText writes a rate of a view: "none" for null.
func rateText(r *string) string {
	if r == nil {
		return "none"
	}
	return *r
}

// nextText says when the next start is allowed by a rate: "now", or "in 12.5s".
func nextText(seconds float64, d string) string {
	if seconds <= 0 {
		return "now"
	}
	return "in " + d
}

// plural writes n and its noun: "1 start", "0 starts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// changesShown is how many of a task's last changes 'tasks show' prints.
const changesShown = 10

func printSlots(w io.Writer, slots []httpapi.Slot) error {
	if len(slots) == 0 {
		_, err := fmt.Fprintln(w, "No slots yet.")
		return err
	}
	t := newTable(w, "SLOT", "STATUS", "EXECUTION", "HOST", "HEARTBEAT AGE", "LIVENESS", "FENCE", "PROGRESS")
	for _, s := range slots {
		h := s.Holder
		switch {
		case h == nil:
			t.row(s.TokenID[:8], s.Status, "-", "-", "-", "-", "-", "-")
		case !h.Found:
			t.row(s.TokenID[:8], s.Status, fmt.Sprintf("#%d", h.ExecutionID), "-", "-", "dead (row missing)", "-", "-")
		default:
			live := "dead"
			if h.Alive {
				live = "alive"
			}
			t.row(s.TokenID[:8], s.Status, fmt.Sprintf("#%d", h.ExecutionID), h.Host, fmt.Sprintf("%.1fs", h.HeartbeatAgeSeconds),
				live, fmt.Sprint(h.Fence), progress(h.ItemsDone, h.ItemsTotal))
		}
	}
	return t.flush()
}
