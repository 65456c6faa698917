package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/taskling"
)

// env is what commands need from the process: output streams and the environment.
type env struct {
	stdout, stderr io.Writer
	// rawStdout and rawStderr are the streams unescaped, for a view that redraws its line on a
	// terminal (watch, cleanup's progress): it escapes the stored text it shows itself.
	rawStdout, rawStderr io.Writer
	getenv               func(string) string

	databaseURL string
	output      string
	timeout     time.Duration
}

const rootHelp = `taskling operates the tasks of taskling-go: their slots and holders, their executions, the
operator overrides that tune them while the fleet runs, and the submissions queued for them.

The database is named by --database-url or $TASKLING_DATABASE_URL (a PostgreSQL URL).
Tables are printed for people; --output json prints the HTTP API's JSON shapes, for scripts.

Exit codes:
  0  success
  1  failure: a query failed, or the server stopped with an error
  2  usage: unknown command, bad argument, flag or value, or no database URL
  3  not found: no such task, execution, submission, block or principal
  4  the database cannot be reached
  5  migrate status: some migrations are not applied yet
(submissions watch and executions watch have their own: see their help.)
Errors are printed on stderr as one line starting with "taskling: " (a usage error adds a line
pointing to --help).`

func newRootCommand(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:           "taskling",
		Short:         "Operate taskling tasks: slots, holders, executions, overrides, submissions, dashboard, its principals",
		Long:          rootHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if e.output != "table" && e.output != "json" {
				return usageErrorf("--output is %q; want table or json", e.output)
			}
			if e.timeout <= 0 {
				return usageErrorf("--timeout is %s; want more than zero", e.timeout)
			}
			return nil
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: exitUsage, err: err} })
	root.PersistentFlags().StringVar(&e.databaseURL, "database-url", "", "PostgreSQL URL (default $TASKLING_DATABASE_URL)")
	root.PersistentFlags().StringVarP(&e.output, "output", "o", "table", "output format: table or json")
	root.PersistentFlags().DurationVar(&e.timeout, "timeout", 30*time.Second, "time limit of a command's database work (not of serve)")
	root.AddCommand(newMigrateCommand(e), newTasksCommand(e), newExecutionsCommand(e), newSubmitCommand(e), newSubmissionsCommand(e), newBlocksCommand(e), newCleanupCommand(e), newServeCommand(e), newTokensCommand(e))
	// Unknown subcommands of a command group are usage errors too.
	for _, c := range root.Commands() {
		if !c.Runnable() {
			c.Args = noArgs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				return usageErrorf("%s needs a subcommand: %s", cmd.CommandPath(), subcommands(cmd))
			}
		}
	}
	root.Args = noArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return root
}

func subcommands(cmd *cobra.Command) string {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return strings.Join(names, ", ")
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %s; got %d arguments", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}

func maxArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usageErrorf("%s takes %s; got %d arguments", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}

// parseTaskArg splits "APP/TASK" at its last slash. New names hold no slash; a task made before
// they were refused, whose name holds one, is named by --app and --task (taskTarget).
func parseTaskArg(s string) (app, task string, err error) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return "", "", usageErrorf("task %q: want APP/TASK", s)
	}
	app, task = s[:i], s[i+1:]
	if err := taskling.ValidateName("application name", app); err != nil {
		return "", "", usageErrorf("task %q: %w", s, err)
	}
	if err := taskling.ValidateName("task name", task); err != nil {
		return "", "", usageErrorf("task %q: %w", s, err)
	}
	return app, task, nil
}

// taskTarget is the task a command acts on: its APP/TASK argument, or --app and --task. The flags
// reach a task whose application or task name holds a slash (made before slashes were refused),
// which APP/TASK, split at its last slash, cannot name.
type taskTarget struct {
	cmd      *cobra.Command
	app      string
	task     string
	optional bool // the task may be left out (cleanup: every task)
}

// addTaskTarget gives cmd its APP/TASK argument and the --app and --task flags.
func addTaskTarget(cmd *cobra.Command, optional bool) *taskTarget {
	t := &taskTarget{cmd: cmd, optional: optional}
	cmd.Flags().StringVar(&t.app, "app", "", "the task's application, with --task: instead of APP/TASK, for a name holding a slash")
	cmd.Flags().StringVar(&t.task, "task", "", "the task's name, with --app: instead of APP/TASK")
	cmd.Args = t.checkArgs
	return t
}

func (t *taskTarget) flagged() bool {
	return t.cmd.Flags().Changed("app") || t.cmd.Flags().Changed("task")
}

func (t *taskTarget) checkArgs(cmd *cobra.Command, args []string) error {
	switch {
	case t.flagged() && len(args) > 0:
		return usageErrorf("%s: give APP/TASK or --app and --task, not both", cmd.CommandPath())
	case t.flagged(), len(args) == 1, t.optional && len(args) == 0:
		return nil
	case t.optional:
		return usageErrorf("%s takes at most one argument, APP/TASK (or --app and --task); got %d arguments", cmd.CommandPath(), len(args))
	}
	return usageErrorf("%s takes one argument, APP/TASK (or --app and --task); got %d arguments", cmd.CommandPath(), len(args))
}

// resolve returns the task named by args or the flags ("", "" when an optional one is not).
func (t *taskTarget) resolve(args []string) (app, task string, err error) {
	if !t.flagged() {
		if len(args) == 0 {
			return "", "", nil
		}
		return parseTaskArg(args[0])
	}
	if !t.cmd.Flags().Changed("app") || !t.cmd.Flags().Changed("task") {
		return "", "", usageErrorf("--app and --task go together")
	}
	if err := taskling.ValidateName("--app", t.app); err != nil {
		return "", "", usageErrorf("%w", err)
	}
	if err := taskling.ValidateName("--task", t.task); err != nil {
		return "", "", usageErrorf("%w", err)
	}
	return t.app, t.task, nil
}

// connect opens a pool on the database URL and checks that the server answers.
func (e *env) connect(ctx context.Context) (*pgxpool.Pool, error) {
	url := e.databaseURL
	if url == "" {
		url = e.getenv("TASKLING_DATABASE_URL")
	}
	if url == "" {
		return nil, usageErrorf("no database: set --database-url or TASKLING_DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usageErrorf("--database-url: %v", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, &exitError{code: exitUnreachable, err: fmt.Errorf("connect to the database: %w", err)}
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, &exitError{code: exitUnreachable, err: fmt.Errorf("connect to the database: %w", err)}
	}
	return pool, nil
}

// withPool runs fn with a pool on the database, under the command's timeout.
func (e *env) withPool(ctx context.Context, fn func(ctx context.Context, pool *pgxpool.Pool) error) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	pool, err := e.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return classify(fn(ctx, pool))
}

// withClient runs fn with a client, under the command's timeout.
func (e *env) withClient(ctx context.Context, fn func(ctx context.Context, c *taskling.Client) error) error {
	return e.withPool(ctx, func(ctx context.Context, pool *pgxpool.Pool) error {
		c, err := taskling.NewClient(pool, &taskling.Config{HostName: hostName(e)})
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(ctx, c)
	})
}

func hostName(e *env) string {
	if h := e.getenv("TASKLING_HOST_NAME"); h != "" {
		return h
	}
	return ""
}

// classify maps library errors to exit codes.
func classify(err error) error {
	var ee *exitError
	switch {
	case err == nil || errors.As(err, &ee):
		return err
	case errors.Is(err, errNotFound):
		return &exitError{code: exitNotFound, err: err}
	case errors.Is(err, taskling.ErrInvalidArgument), errors.Is(err, taskling.ErrInvalidSettings):
		return &exitError{code: exitUsage, err: err}
	}
	return err
}
