package settingsfile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/internal/devtools/pgtest"
	"github.com/taskling-go/taskling/internal/devtools/testutil"
	"github.com/taskling-go/taskling/taskling"
	"github.com/taskling-go/taskling/taskling/settingsfile"
)

func TestMain(m *testing.M) { testutil.VerifyNoLeaks(m) }

const good = `# the fleet's limits
[defaults]
keep_alive_death_threshold = "30s"

[applications.billing]
concurrency_limit = 4

[applications.billing.tasks.export]
concurrency_limit = 1
death_mode = "override"
override_threshold = "2h"

[applications.billing.tasks."nightly report"]
disabled = true
`

func write(t *testing.T, path, text string) {
	t.Helper()
	// As editors and config management do: a new file renamed over the old one.
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(text), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func open(t *testing.T, text string) (*settingsfile.Source, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "taskling.toml")
	write(t, path, text)
	src, err := settingsfile.Open(context.Background(), path, nil)
	require.NoError(t, err)
	t.Cleanup(src.Close)
	return src, path
}

func settings(t *testing.T, src *settingsfile.Source, app, task string) taskling.TaskSettings {
	t.Helper()
	s, err := src.TaskSettings(context.Background(), app, task)
	require.NoError(t, err)
	return s
}

func TestTasksInheritFromTheirApplicationAndTheFilesDefaults(t *testing.T) {
	src, _ := open(t, good)
	export := settings(t, src, "billing", "export")
	require.Equal(t, 1, export.ConcurrencyLimit)
	require.Equal(t, taskling.DeathModeOverride, export.DeathMode)
	require.Equal(t, 2*time.Hour, export.OverrideThreshold)
	require.Equal(t, 30*time.Second, export.KeepAliveDeathThreshold, "from [defaults]")
	require.Equal(t, 4, settings(t, src, "billing", "import").ConcurrencyLimit, "from [applications.billing]")
	require.True(t, settings(t, src, "billing", "nightly report").Disabled)
	other := settings(t, src, "other", "task")
	require.Zero(t, other.ConcurrencyLimit, "unset: the layers below decide")
	require.Equal(t, 30*time.Second, other.KeepAliveDeathThreshold)
}

func TestKeepSettingsReadDaysDurationsAndForever(t *testing.T) {
	src, _ := open(t, "[defaults]\nkeep_completed = \"30d\"\n[applications.audit]\nkeep_completed = \"forever\"\nkeep_blocked = \"36h\"\n")
	d := settings(t, src, "other", "task")
	require.Equal(t, 30*24*time.Hour, d.KeepCompleted)
	a := settings(t, src, "audit", "task")
	require.Equal(t, taskling.KeepForever, a.KeepCompleted)
	require.Equal(t, 36*time.Hour, a.KeepBlocked)
	require.Zero(t, a.KeepFailed, "unset: the layers below decide")
}

// TestKeyLimitsAndNamedKeysInheritAndAdd: key_limit like any setting; [….keys.KEY] tables add
// to those of the layers below, a key named again taking the upper one's limit.
func TestKeyLimitsAndNamedKeysInheritAndAdd(t *testing.T) {
	src, _ := open(t, `[defaults]
key_limit = 2
[defaults.keys.acme]
limit = 5
[applications.billing.tasks.export]
concurrency_limit = 40
[applications.billing.tasks.export.keys.acme]
limit = 8
[applications.billing.tasks.export.keys."big co"]
limit = 10
`)
	export := settings(t, src, "billing", "export")
	require.Equal(t, 2, export.KeyLimit, "from [defaults]")
	require.Equal(t, map[string]taskling.KeySettings{"acme": {Limit: 8}, "big co": {Limit: 10}}, export.Keys)
	other := settings(t, src, "other", "task")
	require.Equal(t, map[string]taskling.KeySettings{"acme": {Limit: 5}}, other.Keys)
	for _, tc := range []struct{ text, want string }{
		{"[defaults]\nkey_limit = -1\n", `:2: defaults.key_limit: is -1; want 0 (no key limit) or 1 to 10000`},
		{"[applications.a.keys.acme]\nlimit = 0\n", `:2: applications.a.keys.acme.limit: is 0; want 1 to 10000`},
		{"[applications.a.keys.acme]\nweight = 2\n", `:2: applications.a.keys.acme.weight: unknown key`},
	} {
		path := filepath.Join(t.TempDir(), "taskling.toml")
		write(t, path, tc.text)
		_, err := settingsfile.Open(context.Background(), path, nil)
		require.ErrorIs(t, err, settingsfile.ErrMalformed)
		require.Contains(t, err.Error(), tc.want)
	}
}

func TestABadFileIsRefusedNamingFileLineAndKey(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"syntax", "[defaults\nconcurrency_limit = 1\n", ":2: expected '.' or ']'"},
		{"unknown key", "[applications.billing]\nconcurency_limit = 2\n", `:2: applications.billing.concurency_limit: unknown key`},
		{"out of bounds", "[applications.billing.tasks.export]\n\nconcurrency_limit = 0\n", `:3: applications.billing.tasks.export.concurrency_limit: is 0; want -1 (unlimited) or 1 to 10000`},
		{"bad duration", "[defaults]\nkeep_alive_interval = \"soon\"\n", `:2: defaults.keep_alive_interval: is "soon"`},
		{"bad keep", "[defaults]\nkeep_failed = \"a while\"\n", `:2: defaults.keep_failed: is "a while"; want "forever"`},
		{"short keep", "[applications.a]\nkeep_blocked = \"30s\"\n", `:2: applications.a.keep_blocked: is "30s"`},
		{"bad mode", "[applications.a.tasks.\"b c\"]\ndeath_mode = \"never\"\n", `:2: applications.a.tasks."b c".death_mode: is "never"`},
		{"combination", "[defaults]\nkeep_alive_interval = \"10s\"\n[applications.a]\nkeep_alive_death_threshold = \"15s\"\n",
			`:3: applications.a: these settings, with the layers below them, are refused`},
		{"wrong type", "[defaults]\nconcurrency_limit = \"two\"\n", ":2: defaults.concurrency_limit: incompatible types"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "taskling.toml")
			write(t, path, tc.text)
			_, err := settingsfile.Open(context.Background(), path, nil)
			require.ErrorIs(t, err, settingsfile.ErrMalformed)
			require.Contains(t, err.Error(), path)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestAnEditAppliesAndABrokenEditKeepsTheLastGoodSettings(t *testing.T) {
	src, path := open(t, good)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(src.Collector()))
	write(t, path, strings.Replace(good, "concurrency_limit = 4", "concurrency_limit = 6", 1))
	require.Eventually(t, func() bool { return settings(t, src, "billing", "import").ConcurrencyLimit == 6 },
		5*time.Second, 10*time.Millisecond, "the edit is read without a restart")

	write(t, path, strings.Replace(good, "concurrency_limit = 4", "concurrency_limit = -7", 1))
	require.Eventually(t, func() bool { return src.Status().Err != nil }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 6, settings(t, src, "billing", "import").ConcurrencyLimit, "the last good settings stay")
	require.Contains(t, src.Status().Err.Error(), "applications.billing.concurrency_limit: is -7")
	families, err := reg.Gather()
	require.NoError(t, err)
	values := map[string]float64{}
	for _, f := range families {
		m := f.GetMetric()[0]
		values[f.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	require.Equal(t, 1.0, values["taskling_settings_file_error"])
	require.GreaterOrEqual(t, values["taskling_settings_file_failures_total"], 1.0)

	write(t, path, good)
	require.Eventually(t, func() bool { return src.Status().Err == nil }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 4, settings(t, src, "billing", "import").ConcurrencyLimit)
}

// TestTwoHostsWithTwoFiles: each client reads its own file. The limit in force at a grant is the
// requester's declared one, and an edit of a host's file is obeyed by that host's next start.
func TestTwoHostsWithTwoFiles(t *testing.T) {
	ctx := context.Background()
	pool, _ := pgtest.NewDB(t)
	srcA, pathA := open(t, "[applications.app.tasks.task]\nconcurrency_limit = 1\n")
	srcB, _ := open(t, "[applications.app.tasks.task]\nconcurrency_limit = 2\n")
	a, err := taskling.NewClient(pool, &taskling.Config{HostName: "host-a", Settings: srcA})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	b, err := taskling.NewClient(pool, &taskling.Config{HostName: "host-b", Settings: srcB})
	require.NoError(t, err)
	t.Cleanup(b.Close)

	first, err := a.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err)
	defer func() { _ = first.Complete(ctx) }()
	_, err = a.StartExecution(ctx, "app", "task", nil)
	require.ErrorIs(t, err, taskling.ErrLimitReached, "host a's file says 1")
	second, err := b.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err, "host b's file says 2: its start declares 2")
	defer func() { _ = second.Complete(ctx) }()
	var info taskling.TaskDetail
	require.Eventually(t, func() bool {
		info, err = b.Task(ctx, "app", "task")
		require.NoError(t, err)
		return info.Disagreement != nil
	}, 5*time.Second, 10*time.Millisecond, "the hosts' files disagree: the task says so")
	require.Equal(t, 2, info.DeclaredLimit)
	require.Equal(t, "host-b", info.DeclaredBy)
	require.Equal(t, "host-a", info.Disagreement.OtherHost)
	require.Equal(t, 1, info.Disagreement.OtherLimit)

	write(t, pathA, "[applications.app.tasks.task]\nconcurrency_limit = 3\n")
	require.Eventually(t, func() bool { return settings(t, srcA, "app", "task").ConcurrencyLimit == 3 }, 5*time.Second, 10*time.Millisecond)
	third, err := a.StartExecution(ctx, "app", "task", nil)
	require.NoError(t, err, "the edit is obeyed by host a's next start")
	require.NoError(t, third.Complete(ctx))
}

func TestAMissingFileIsAnError(t *testing.T) {
	_, err := settingsfile.Open(context.Background(), filepath.Join(t.TempDir(), "nope.toml"), nil)
	require.True(t, errors.Is(err, os.ErrNotExist), "got %v", err)
}

func TestTheExampleFileIsGood(t *testing.T) {
	src, err := settingsfile.Open(context.Background(), "../../examples/settings/taskling.toml", nil)
	require.NoError(t, err)
	defer src.Close()
	require.Equal(t, 1, settings(t, src, "billing", "export").ConcurrencyLimit)
	require.Equal(t, -1, settings(t, src, "crm", "sync").ConcurrencyLimit)
	require.True(t, settings(t, src, "legacy", "import").Disabled)
	billing := settings(t, src, "billing", "export")
	require.Equal(t, 36*time.Hour, billing.KeepCompleted)
	require.Equal(t, 90*24*time.Hour, billing.KeepFailed)
	require.Equal(t, taskling.KeepForever, billing.KeepBlocked)
}

// TestAFileOverOneMiBIsRefused is issue 23 item 6: the file was read whole, whatever its size
// (38 MB allocated 278 MB). A file over the cap is refused naming the file and the cap, at Open
// and on an edit, which keeps the last good settings.
func TestAFileOverOneMiBIsRefused(t *testing.T) {
	big := "[defaults]\nconcurrency_limit = 3\n" + strings.Repeat("# padding\n", settingsfile.MaxFileSize/10)
	require.Greater(t, len(big), settingsfile.MaxFileSize)
	path := filepath.Join(t.TempDir(), "taskling.toml")
	write(t, path, big)
	_, err := settingsfile.Open(context.Background(), path, nil)
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "at most 1048576 bytes (1 MiB)")

	src, path := open(t, good)
	write(t, path, big)
	require.Eventually(t, func() bool { return src.Status().Err != nil }, 5*time.Second, 10*time.Millisecond)
	require.ErrorContains(t, src.Status().Err, "at most 1048576 bytes")
	require.Equal(t, 4, settings(t, src, "billing", "import").ConcurrencyLimit, "the last good settings stay")
	require.NoError(t, os.WriteFile(path, []byte(big[:settingsfile.MaxFileSize]), 0o600))
	require.NoError(t, src.Reload(), "a file of exactly 1 MiB is read")
	require.Equal(t, 3, settings(t, src, "other", "task").ConcurrencyLimit)
}

// TestANonRegularFileIsRefused is issue 23 item 6: a symlink to /dev/zero was read until the
// process died of an out-of-memory fatal error. What the path resolves to must be a regular file.
func TestANonRegularFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, target := range []string{"/dev/null", "/dev/zero", dir, fifo} {
		path := filepath.Join(t.TempDir(), "taskling.toml")
		require.NoError(t, os.Symlink(target, path))
		_, err := settingsfile.Open(context.Background(), path, nil)
		require.ErrorContains(t, err, path, target)
		require.ErrorContains(t, err, "not a regular file", target)
	}
}

// TestAConfigMapUpdateIsSeen is issue 23 item 6: Kubernetes mounts a ConfigMap as
// taskling.toml -> ..data/taskling.toml, ..data -> ..<timestamp>, and updates it by writing a new
// timestamped directory and renaming a new ..data_tmp symlink over ..data. No event names
// taskling.toml, so the update was never read.
func TestAConfigMapUpdateIsSeen(t *testing.T) {
	dir := t.TempDir()
	version := func(stamp, text string) {
		require.NoError(t, os.Mkdir(filepath.Join(dir, stamp), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, stamp, "taskling.toml"), []byte(text), 0o644))
	}
	swap := func(stamp, old string) {
		require.NoError(t, os.Symlink(stamp, filepath.Join(dir, "..data_tmp")))
		require.NoError(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
		require.NoError(t, os.RemoveAll(filepath.Join(dir, old)))
	}
	limit := func(n int) string { return "[applications.billing]\nconcurrency_limit = " + strconv.Itoa(n) + "\n" }
	version("..2026_11_26_10_00_00.1", limit(1))
	require.NoError(t, os.Symlink("..2026_11_26_10_00_00.1", filepath.Join(dir, "..data")))
	path := filepath.Join(dir, "taskling.toml")
	require.NoError(t, os.Symlink("..data/taskling.toml", path))
	src, err := settingsfile.Open(context.Background(), path, nil)
	require.NoError(t, err)
	t.Cleanup(src.Close)
	require.Equal(t, 1, settings(t, src, "billing", "x").ConcurrencyLimit)

	for i, stamp := range []string{"..2026_11_26_10_05_00.2", "..2026_11_26_10_10_00.3"} {
		old := map[int]string{0: "..2026_11_26_10_00_00.1", 1: "..2026_11_26_10_05_00.2"}[i]
		version(stamp, limit(i+2))
		start := time.Now()
		swap(stamp, old)
		require.Eventually(t, func() bool { return settings(t, src, "billing", "x").ConcurrencyLimit == i+2 },
			2*time.Second, 5*time.Millisecond, "update %d is read", i+1)
		t.Logf("update %d read %s after the swap (debounce 50ms)", i+1, time.Since(start).Round(time.Millisecond))
	}
	require.Equal(t, int64(3), src.Status().Reloads, "one read per update")
}

// TestAnEditOfASymlinksTargetIsSeen: the path is a symlink to a file in another directory, which
// an editor replaces; the events name the target, in the target's directory, watched too.
func TestAnEditOfASymlinksTargetIsSeen(t *testing.T) {
	target := filepath.Join(t.TempDir(), "real.toml")
	write(t, target, good)
	path := filepath.Join(t.TempDir(), "taskling.toml")
	require.NoError(t, os.Symlink(target, path))
	src, err := settingsfile.Open(context.Background(), path, nil)
	require.NoError(t, err)
	t.Cleanup(src.Close)
	write(t, target, strings.Replace(good, "concurrency_limit = 4", "concurrency_limit = 5", 1))
	require.Eventually(t, func() bool { return settings(t, src, "billing", "import").ConcurrencyLimit == 5 },
		2*time.Second, 5*time.Millisecond)
}

// TestRatesInheritOverrideToNoneAndNameTheirKey: rate and key_rate like any setting ("none" over a
// rate below), a named key's rate with or without its limit; a bad rate names its TOML key.
func TestRatesInheritOverrideToNoneAndNameTheirKey(t *testing.T) {
	src, _ := open(t, `[defaults]
rate = "100/1m"
key_rate = "10/1m,burst=2"
[defaults.keys.acme]
limit = 3
rate = "20/1m"
[applications.billing.tasks.export]
rate = "none"
[applications.billing.tasks.export.keys.globex]
rate = "5/1m"
`)
	export := settings(t, src, "billing", "export")
	require.True(t, export.Rate.IsZero(), `"none" over the default's rate`)
	require.Equal(t, taskling.Rate{Count: 10, Per: time.Minute, Burst: 2}, export.KeyRate, "from [defaults]")
	require.Equal(t, map[string]taskling.KeySettings{"acme": {Limit: 3, Rate: taskling.Rate{Count: 20, Per: time.Minute}},
		"globex": {Rate: taskling.Rate{Count: 5, Per: time.Minute}}}, export.Keys)
	other := settings(t, src, "other", "task")
	require.Equal(t, taskling.Rate{Count: 100, Per: time.Minute}, other.Rate)
	for _, tc := range []struct{ text, want string }{
		{"[defaults]\nrate = \"fast\"\n", `:2: defaults.rate: is "fast": rate "fast"`},
		{"[applications.a]\nkey_rate = \"0/1m\"\n", `:2: applications.a.key_rate: is "0/1m"`},
		{"[applications.a.tasks.t]\nrate = \"\"\n", `:2: applications.a.tasks.t.rate: is empty`},
		{"[applications.a.keys.acme]\nrate = \"1/1ns\"\n", `:2: applications.a.keys.acme.rate: is "1/1ns"`},
		{"[applications.a.keys.acme]\nrate = \"none\"\n", `:1: applications.a.keys.acme.limit: is missing`},
		{"[defaults]\nrate = 5\n", `:2: defaults.rate: incompatible types`},
	} {
		path := filepath.Join(t.TempDir(), "taskling.toml")
		write(t, path, tc.text)
		_, err := settingsfile.Open(context.Background(), path, nil)
		require.ErrorIs(t, err, settingsfile.ErrMalformed)
		require.Contains(t, err.Error(), tc.want)
	}
}
