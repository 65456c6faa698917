// Package mixedfleet tests a fleet in the middle of an upgrade with a binary of the previous
// grant protocol, built from the repository's history.
package mixedfleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/migrations"
	"github.com/taskling-go/taskling/taskling"
)

// oldCommit is a commit of grant protocol 6 (before migration 0023), in main's history.
const oldCommit = "c165b82df37e8588742d180015e9f95764fa1431"

// oldProgram is a worker of that commit: "hold" starts an execution and completes it when told
// on stdin (printing what Complete returned); "start" tries one start and prints its error.
const oldProgram = `package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/taskling"
)

func main() {
	url := os.Getenv("TASKLING_DATABASE_URL") // not on the command line: anyone may read that
	mode := flag.String("mode", "hold", "")
	flag.Parse()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer pool.Close()
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "old-" + *mode, Defaults: taskling.TaskSettings{
		ConcurrencyLimit: 2, KeepAliveInterval: 100 * time.Millisecond, KeepAliveDeathThreshold: time.Second}})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer client.Close()
	e, err := client.StartExecution(ctx, "app", "task", nil)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println("granted", e.ID(), taskling.ProtocolVersion)
	if *mode != "hold" {
		_ = e.Complete(ctx)
		return
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "complete" {
			fmt.Println("completed", e.Complete(ctx), e.Context().Err())
			return
		}
	}
}
`

// buildOld builds oldProgram from oldCommit, or skips when the repository's history is not
// at hand (a source archive).
func buildOld(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil || exec.Command("git", "cat-file", "-e", oldCommit+"^{commit}").Run() != nil {
		t.Skip("the repository's history (git) is needed to build a binary of grant protocol 6")
	}
	dir := t.TempDir()
	archive := exec.Command("git", "-C", strings.TrimSpace(string(root)), "archive", "--format=tar", "-o", filepath.Join(dir, "src.tar"), oldCommit)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive: %v: %s", err, out)
	}
	src := filepath.Join(dir, "src")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "oldworker"), 0o755))
	if out, err := exec.Command("tar", "-xf", filepath.Join(dir, "src.tar"), "-C", src).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "oldworker", "main.go"), []byte(oldProgram), 0o644))
	bin := filepath.Join(dir, "oldworker-bin")
	build := exec.Command("go", "build", "-o", bin, "./oldworker")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the protocol 6 worker: %v: %s", err, out)
	}
	return bin
}

type oldWorker struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func runOld(t *testing.T, bin, url, mode string) *oldWorker {
	t.Helper()
	cmd := exec.Command(bin, "-mode", mode)
	cmd.Env = append(os.Environ(), "TASKLING_DATABASE_URL="+url)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	lines, err := testutil.DescendantCommandLines(os.Getpid())
	require.NoError(t, err)
	testutil.RequireNoDatabaseURL(t, url, lines)
	w := &oldWorker{cmd: cmd, in: in, lines: make(chan string, 10)}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			w.lines <- s.Text()
		}
		close(w.lines)
	}()
	t.Cleanup(func() { _ = in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return w
}

func (w *oldWorker) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-w.lines:
		require.True(t, ok, "the old worker exited")
		return l
	case <-time.After(60 * time.Second):
		t.Fatal("no word from the old worker")
	}
	return ""
}

// TestABinaryOfProtocol6RefusesToGrantButHeartbeatsAndCompletes: a fleet mid-upgrade. A worker of
// grant protocol 6 holds a slot when the database is migrated to 0023 (rates, protocol 7). Another
// worker of protocol 6 then refuses to grant (ErrUpgradeRequired, naming both versions): it does
// not know rates, so it must not grant past one. The holder keeps heartbeating past several death
// thresholds — its slot counts against the limit of the new binary's rated starts — and completes
// normally, after which the new binary takes the slot, within its rate.
func TestABinaryOfProtocol6RefusesToGrantButHeartbeatsAndCompletes(t *testing.T) {
	bin := buildOld(t)
	ctx := context.Background()
	pool, url := pgtest.NewEmptyDB(t)
	require.NoError(t, migrations.UpTo(ctx, pool, 22))

	holder := runOld(t, bin, url, "hold")
	require.Regexp(t, `^granted \d+ 6$`, holder.line(t))

	require.NoError(t, migrations.Up(ctx, pool))
	refused := runOld(t, bin, url, "start")
	require.Contains(t, refused.line(t), "error: taskling: start app/task: acquire app/task: taskling: upgrade required: the database runs grant protocol 7; this binary speaks protocol 6")

	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "new", Defaults: taskling.TaskSettings{ConcurrencyLimit: 2,
		Rate: taskling.Rate{Count: 2, Per: time.Hour, Burst: 2}, KeepAliveInterval: 100 * time.Millisecond, KeepAliveDeathThreshold: time.Second}})
	require.NoError(t, err)
	defer client.Close()
	rated, err := client.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err)
	_, err = client.StartExecution(ctx, "app", "task", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached, "the old holder and the new one hold the 2 slots")
	time.Sleep(3 * time.Second) // three death thresholds: the old holder lives by its heartbeats
	_, err = client.StartExecution(ctx, "app", "task", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached, "the old holder still holds its slot")

	_, err = fmt.Fprintln(holder.in, "complete")
	require.NoError(t, err)
	require.Equal(t, "completed <nil> context canceled", holder.line(t), "its completion returns its slot")
	again, err := client.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err, "the second unit of the rate")
	require.NoError(t, again.Complete(ctx))
	require.NoError(t, rated.Complete(ctx))
	_, err = client.StartExecution(ctx, "app", "task", nil)
	require.ErrorIs(t, err, taskling.ErrRateLimited, "2 an hour, burst 2: the old binary's grant was before the rate")
}
