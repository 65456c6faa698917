package taskling

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/store/adminstore"
	"github.com/taskling-go/taskling/internal/store/blockstore"
	"github.com/taskling-go/taskling/internal/store/historystore"
	"github.com/taskling-go/taskling/internal/store/schedulestore"
	"github.com/taskling-go/taskling/internal/store/submitstore"
)

// Version is recorded on every execution row.
const Version = "0.2.0"

// ProtocolVersion is the version of the grant rules this binary follows. Migrations store the
// database's in taskling.protocol; a binary older than the database refuses to grant
// (ErrUpgradeRequired).
const ProtocolVersion = execution.ProtocolVersion

// Isolation is the isolation level of the token transactions.
type Isolation int

const (
	// IsolationReadCommitted (the default) relies on the task row's lock, which every token
	// transaction takes (after its stripe), to serialize all token transactions of a task, and
	// rechecks every reclaimed holder under its session's row lock. It stays the default because
	// SERIALIZABLE did not meet every benchmark target in the consecutive runs its switch required
	// (docs/how-it-works.md, "Isolation and the stripe locks").
	IsolationReadCommitted Isolation = iota
	// IsolationSerializable, the level the design asks for, adds PostgreSQL's serializable checks
	// on top, with the same limits. Unrelated tasks do not abort each other (a token transaction
	// reads only its tasks' rows and what they name, by primary key), and transactions of one task
	// do not either: each first locks its task's stripe, before its snapshot, so it waits for the
	// one before it instead of failing when that one commits. A fleet may mix the two levels.
	IsolationSerializable
)

// Config configures a Client. A nil *Config, or a zero field, means the documented default.
type Config struct {
	// Logger receives warnings: conflicting declarations of a limit, failed heartbeats and lost
	// leases, failures of the notification listener (waiters then poll), failed scheduler steps,
	// a server found read-only. nil: no logging.
	Logger *zap.Logger
	// HostName is recorded on executions. "" means os.Hostname(). (The CLI reads it from
	// TASKLING_HOST_NAME.)
	HostName string
	// Defaults for every task, over the library defaults.
	Defaults TaskSettings
	// Settings supplies per-task settings over Defaults. nil: none.
	Settings SettingsSource
	// Isolation of the token transactions. Default IsolationReadCommitted.
	Isolation Isolation
	// MaxPollInterval caps the wait between two attempts of a WaitForSlot start when no
	// notification arrives (notifications are lost behind a transaction-pooling PgBouncer).
	// Default 2s, at most 30s (a waiter's mark on the task, which makes releases notify, lasts 60s).
	MaxPollInterval time.Duration
	// Pooler names the pooler between pool and PostgreSQL: PoolerNone (default), or
	// PoolerTransaction (or PoolerTransactionPrepared) for PgBouncer in transaction mode; see
	// the README's PgBouncer paragraph. NewClient refuses a pool whose exec mode fails through it.
	Pooler PoolerMode
	// ListenerConnString (a URL or keyword/value string) names the PostgreSQL server itself,
	// bypassing a transaction pooler, for the one connection on which the client LISTENs for
	// freed slots; the pool's BeforeConnect and AfterConnect hooks do not run on it. Only with a
	// transaction Pooler; without it such a client does not listen, and its waiters poll.
	ListenerConnString string
	// CleanupInterval: how often at most each task's history is cleaned, fleet-wide, by its
	// keep settings (every client that starts executions takes part, from its first start; each
	// task is claimed by one host at a time).
	// Default 5 minutes; at least 1s; negative turns this client's automatic cleanup off.
	CleanupInterval time.Duration
}

// Client starts executions of tasks. It is safe for concurrent use; make one per process and
// Close it when done.
type Client struct {
	pool     *pgxpool.Pool
	store    *execution.Store // the grant protocol
	notifier *execution.Notifier
	// The feature stores, on the protocol's pool.
	blocks   *blockstore.Store
	subs     *submitstore.Store
	scheds   *schedulestore.Store
	admin    *adminstore.Store
	history  *historystore.Store
	log      *zap.Logger
	host     string
	defaults TaskSettings
	source   SettingsSource
	maxPoll  time.Duration
	hooks    hookList

	taskIDs      sync.Map // "app\x00task" -> int64
	disputes     sync.Map // task id -> time.Time of the last disagreement recorded (noteDispute)
	declarations sync.Map // task id -> the declaration last recorded (noteDeclaration)

	cleanupEvery time.Duration             // the automatic cleanup's interval; negative: none
	cleaner      sync.Once                 // starts the automatic cleanup with the client's first start
	tallied      atomic.Pointer[time.Time] // when this client last compacted the submission tally (submit.go)

	sched scheduler    // cron registrations (schedule.go)
	hb    *heartbeater // the session and its heartbeats (heartbeat.go)
	drain drainer      // runs of Work and RunScheduler, for Shutdown (work.go)

	testHooks struct {
		claimDenied func() // a scheduler claim was denied for the limit (export_test.go)
	}

	closeOnce sync.Once
	closed    chan struct{}
	live      sync.WaitGroup // the heartbeat loop
}

// NewClient returns a Client on pool. The schema must exist (migrations.Up).
func NewClient(pool *pgxpool.Pool, cfg *Config) (*Client, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pool is nil", ErrInvalidArgument)
	}
	if cfg == nil {
		cfg = &Config{}
	}
	if err := cfg.Defaults.validateLayer("Config.Defaults"); err != nil {
		return nil, err
	}
	if cfg.Isolation != IsolationSerializable && cfg.Isolation != IsolationReadCommitted {
		return nil, fmt.Errorf("%w: Config.Isolation is %d", ErrInvalidArgument, cfg.Isolation)
	}
	if cfg.MaxPollInterval < 0 || cfg.MaxPollInterval > 30*time.Second {
		return nil, fmt.Errorf("%w: Config.MaxPollInterval is %s; want 0 (default 2s) up to 30s", ErrInvalidArgument, cfg.MaxPollInterval)
	}
	listener, err := cfg.listenerConfig(pool)
	if err != nil {
		return nil, err
	}
	defaults := librarySettings().over(cfg.Defaults)
	if _, err := defaults.toStore("Config.Defaults"); err != nil {
		return nil, err
	}
	host := cfg.HostName
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("taskling: host name: %w", err)
		}
		host = h
	}
	if err := validateName("Config.HostName", host); err != nil {
		return nil, err
	}
	if err := ValidateOperator("Config.HostName", host); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	cleanupEvery := cfg.CleanupInterval
	if cleanupEvery == 0 {
		cleanupEvery = DefaultCleanupInterval
	}
	if cleanupEvery > 0 && cleanupEvery < time.Second {
		return nil, fmt.Errorf("%w: Config.CleanupInterval is %s; want at least 1s, or negative for no automatic cleanup", ErrInvalidArgument, cleanupEvery)
	}
	maxPoll := cfg.MaxPollInterval
	if maxPoll == 0 {
		maxPoll = 2 * time.Second
	}
	notifier := execution.NewNotifierWith(pool, execution.NotifierOptions{
		OnError: func(err error, retryIn time.Duration) {
			log.Warn("taskling: the notification listener failed; waiters poll until it is back",
				zap.Error(err), zap.Duration("retry_in", retryIn))
		},
		// Through a transaction pooler a LISTEN would land on a server connection that
		// goes back to the pool: only a direct listener, else none (waiters poll).
		Listener: listener,
		Off:      cfg.Pooler.transaction() && listener == nil,
		OnUndelivered: func() {
			log.Warn("taskling: a notification sent through the pool did not reach the listener (a transaction-pooling PgBouncer "+
				"between them? set Config.Pooler and Config.ListenerConnString); waiters in other processes find freed slots by polling",
				zap.Duration("max_poll_interval", maxPoll))
		},
	})
	store := execution.NewStore(pool, &execution.Options{Serializable: cfg.Isolation == IsolationSerializable, LibraryVersion: Version,
		OnReadOnly: func() {
			log.Warn("taskling: the database server is read-only (a standby, or a primary demoted by a failover): the pool was reset, " +
				"and the next connections are dialled anew (a multi-host URL with target_session_attrs=read-write finds the new primary)")
			notifier.Reconnect() // it would listen on the old server, which no longer notifies
		}})
	c := &Client{
		pool:     pool,
		store:    store,
		notifier: notifier,
		blocks:   blockstore.New(store),
		subs:     submitstore.New(store),
		scheds:   schedulestore.New(store),
		admin:    adminstore.New(store),
		history:  historystore.New(store.DB()),
		log:      log,
		host:     host,
		defaults: defaults,
		source:   cfg.Settings,
		maxPoll:  maxPoll,
		closed:   make(chan struct{}),
	}
	c.hb = newHeartbeater(c)
	c.drain.init()
	c.cleanupEvery = cleanupEvery
	return c, nil
}

// Close stops the client's listener and closes its connections (the heartbeats' once no execution
// needs it). Executions already started keep heartbeating until they complete: Close neither
// waits for them nor ends them. A
// process that exits without completing its executions leaves their slots held until they are
// judged dead, one death threshold after their last heartbeat: complete (or let Run complete)
// every execution before exiting.
func (c *Client) Close() {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.notifier.Close()
		c.hb.idle()
	})
}

// HostName is the host name recorded on this client's executions.
func (c *Client) HostName() string { return c.host }

// MaxNameLength is the longest application or task name, in bytes.
const MaxNameLength = 200

// ValidateName checks an application or task name as this package's reads do: non-empty, at most
// MaxNameLength bytes, valid UTF-8, no control characters. The error wraps ErrInvalidArgument and
// names field. Tools use it to reject a bad name before querying. A name it accepts may still be
// refused for a new task (see ValidateNewName): a task made before that keeps its name.
func ValidateName(field, s string) error { return validateName(field, s) }

// ValidateNewName checks the application or task name of a task that does not exist yet, as every
// function that creates one does: ValidateName's rules, no '/' (it separates application and
// task in APP/TASK, so "a/b" + "c" and "a" + "b/c" would print alike), not "." or ".." (a path
// segment that browsers and HTTP clients remove from a URL, percent-encoded or not, so a link to
// the task would lead elsewhere) and no invisible character (see Invisible). A function given a
// name it refuses still serves a task that already has that name. The error wraps
// ErrInvalidArgument and names field.
func ValidateNewName(field, s string) error {
	if err := validateName(field, s); err != nil {
		return err
	}
	if strings.Contains(s, "/") {
		return fmt.Errorf("%w: %s %q contains '/', which separates application and task in APP/TASK", ErrInvalidArgument, field, s)
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%w: %s is %q, a path segment that URLs drop (a link to the task would lead elsewhere)", ErrInvalidArgument, field, s)
	}
	return refuseInvisible(field, s)
}

// ValidateOperator checks a name recorded as who made an operator change (SettingsUpdate.By, the
// by of ClearOverridesBy, CancelSubmissionBy and the retire calls, ForceBlock's forcedBy) or a
// host name: at most MaxNameLength bytes, valid UTF-8, no control and no invisible character (see
// Invisible). "" passes: it means a default (for an operator's name, "library@" and the
// client's host name; for Config.HostName, os.Hostname()). The error wraps ErrInvalidArgument and
// names field.
func ValidateOperator(field, s string) error {
	if s == "" {
		return nil
	}
	if err := validateName(field, s); err != nil {
		return err
	}
	return refuseInvisible(field, s)
}

// MaxKeyLength is the longest key (StartOptions.Key), in bytes.
const MaxKeyLength = MaxNameLength

// ValidateKey checks a key as starts, submissions and schedules do: "" (no key), or at most
// MaxKeyLength bytes of valid UTF-8 with no control and no invisible character (see Invisible),
// as a name ('/' allowed). The error wraps ErrInvalidArgument and names field.
func ValidateKey(field, key string) error {
	if key == "" {
		return nil
	}
	if err := validateName(field, key); err != nil {
		return err
	}
	return refuseInvisible(field, key)
}

func validateKey(field, key string) error { return ValidateKey(field, key) }

// Invisible reports whether r is refused in new names and operator names because it is not seen
// where it is printed, yet changes what is: Unicode's format characters (category Cf: the
// bidirectional embeddings, overrides, isolates and marks U+202A–U+202E, U+2066–U+2069,
// U+200E, U+200F, U+061C; the zero-width space, joiners and word joiner; the byte order mark;
// the soft hyphen; tag characters) and the line and paragraph separators U+2028 and U+2029.
// (Emoji joined by U+200D are refused with them.)
func Invisible(r rune) bool {
	return unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

func refuseInvisible(field, s string) error {
	if i := strings.IndexFunc(s, Invisible); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		return fmt.Errorf("%w: %s contains the invisible character %U at byte %d", ErrInvalidArgument, field, r, i)
	}
	return nil
}

// validateName checks an application, task or host name: non-empty, at most 200 bytes, valid
// UTF-8, no control characters.
func validateName(field, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalidArgument, field)
	case len(s) > MaxNameLength:
		return fmt.Errorf("%w: %s is %d bytes; at most %d allowed", ErrInvalidArgument, field, len(s), MaxNameLength)
	}
	return ValidateChars(field, s)
}

// ValidateChars checks text compared with names, such as TaskFilter.Search or a query parameter
// of the HTTP API, by the characters a name may hold: valid UTF-8 with no control character (""
// passes; PostgreSQL refuses a NUL byte and invalid UTF-8 in text, so such a string matches
// nothing and would fail a query). The error wraps ErrInvalidArgument and names field.
func ValidateChars(field, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidArgument, field)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s contains control character %U", ErrInvalidArgument, field, r)
		}
	}
	return nil
}

func validateNewTask(app, task string) error {
	if err := ValidateNewName("application name", app); err != nil {
		return err
	}
	return ValidateNewName("task name", task)
}

func validateTask(app, task string) error {
	if err := validateName("application name", app); err != nil {
		return err
	}
	return validateName("task name", task)
}

// validateOwnTask validates a task that a call may start, submit to, schedule or tune: not a
// task's critical section, which only CriticalSection uses (its limit must stay 1).
func validateOwnTask(app, task string) error {
	if err := validateTask(app, task); err != nil {
		return err
	}
	if strings.HasSuffix(task, SectionSuffix) {
		return fmt.Errorf("%w: task name %q ends with %q, reserved for critical sections", ErrInvalidArgument, task, SectionSuffix)
	}
	return nil
}

// taskID returns the task row's id, creating the row on first use; ids are cached (they never
// change). A new task's names must pass ValidateNewName; a task whose row exists keeps its names,
// and so does its critical section.
func (c *Client) taskID(ctx context.Context, app, task string) (int64, error) {
	key := app + "\x00" + task
	if v, ok := c.taskIDs.Load(key); ok {
		return v.(int64), nil
	}
	own := strings.TrimSuffix(task, SectionSuffix)
	if err := validateNewTask(app, own); err != nil {
		_, exists, ferr := c.store.FindTask(ctx, app, own)
		if ferr != nil {
			return 0, ferr
		}
		if !exists {
			return 0, err
		}
	}
	id, err := c.store.EnsureTask(ctx, app, task)
	if err != nil {
		return 0, err
	}
	c.taskIDs.Store(key, id)
	return id, nil
}

// declared merges the layers below the operator's overrides for a task.
func (c *Client) declared(ctx context.Context, app, task string) (TaskSettings, execution.Settings, error) {
	s := c.defaults
	if c.source != nil {
		layer, err := c.source.TaskSettings(ctx, app, task)
		if err != nil {
			return s, execution.Settings{}, fmt.Errorf("taskling: settings of %s/%s: %w", app, task, err)
		}
		if err := layer.validateLayer("settings source for " + app + "/" + task); err != nil {
			return s, execution.Settings{}, err
		}
		s = s.over(layer)
	}
	es, err := s.toStore("settings of " + app + "/" + task)
	return s, es, err
}

// UpdateTaskSettings stores operator overrides for a task (see Operations.UpdateTaskSettings),
// recorded as made by the operator named by update.By (deprecated; "" means "library@" and this
// client's host name).
func (c *Client) UpdateTaskSettings(ctx context.Context, app, task string, update SettingsUpdate) error {
	o, err := c.asBy("SettingsUpdate.By", update.By)
	if err != nil {
		return err
	}
	return o.UpdateTaskSettings(ctx, app, task, update)
}

// ClearOverrides removes every operator override of a task (see Operations.ClearOverrides),
// recorded as made by "library@" and this client's host name.
func (c *Client) ClearOverrides(ctx context.Context, app, task string) error {
	return c.As(Operator{}).ClearOverrides(ctx, app, task)
}

// UpdateKeySettings stores an operator's override of a named key's settings (see
// Operations.UpdateKeySettings), recorded as made by "library@" and this client's host name.
func (c *Client) UpdateKeySettings(ctx context.Context, app, task, key string, update KeySettingsUpdate) error {
	return c.As(Operator{}).UpdateKeySettings(ctx, app, task, key, update)
}

// ClearKeyOverrides removes the operator's overrides of a named key (see
// Operations.ClearKeyOverrides), recorded as made by "library@" and this client's host name.
func (c *Client) ClearKeyOverrides(ctx context.Context, app, task, key string) error {
	return c.As(Operator{}).ClearKeyOverrides(ctx, app, task, key)
}

// ClearOverridesBy is ClearOverrides recorded as made by the operator named by ("" means
// "library@" and this client's host name).
//
// Deprecated: use c.As(Operator{Name: by}).ClearOverrides(ctx, app, task), which records the
// same.
func (c *Client) ClearOverridesBy(ctx context.Context, app, task, by string) error {
	o, err := c.asBy("by", by)
	if err != nil {
		return err
	}
	return o.ClearOverrides(ctx, app, task)
}

func (c *Client) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}
