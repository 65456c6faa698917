// Command taskling operates taskling's tasks from a terminal: it migrates the schema, lists tasks
// with their slots and holders, sets and clears operator overrides, shows executions, submits runs
// and follows or cancels them, and serves the HTTP API and web dashboard. Run `taskling --help`
// for the commands and the exit codes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit codes: stable, documented in the root command's help.
const (
	exitOK          = 0
	exitFailure     = 1 // any other error (a query failed, the server stopped with an error)
	exitUsage       = 2 // bad command, argument, flag or flag value; no database URL
	exitNotFound    = 3 // no such task, execution or submission
	exitUnreachable = 4 // cannot connect to the database
	exitPending     = 5 // migrate status: some migrations are not applied
)

// exitError carries an exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit code. getenv is os.Getenv outside tests.
func run(ctx context.Context, args []string, rawStdout, rawStderr io.Writer, getenv func(string) string) int {
	// Stored text (names, messages) reaches the terminal escaped, whatever prints it.
	stdout, stderr := &terminalWriter{w: rawStdout}, &terminalWriter{w: rawStderr}
	defer stderr.flush()
	defer stdout.flush()
	cmd := newRootCommand(&env{stdout: stdout, stderr: stderr, rawStdout: rawStdout, rawStderr: rawStderr, getenv: getenv})
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code := exitFailure
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	// One line, whatever the error (pgx's connection errors span several).
	// Library errors already start with "taskling: ".
	msg := strings.TrimPrefix(strings.Join(strings.Fields(err.Error()), " "), "taskling: ")
	fmt.Fprintf(stderr, "taskling: %s\n", msg)
	if code == exitUsage {
		fmt.Fprintln(stderr, "Run 'taskling --help' for usage.")
	}
	return code
}
