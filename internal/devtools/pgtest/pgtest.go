// Package pgtest gives each test its own PostgreSQL database, migrated to the embedded schema
// (NewDB) or empty (NewEmptyDB), on the server named by TASKLING_DATABASE_URL or else on the
// private cluster of package pgcluster, which it starts on first use.
//
// A migrated database is a copy of a template database, taskling_tmpl_<migrations.Hash()>,
// made once per server and schema version (cross-process safe: under an advisory lock), so a
// new database costs one CREATE DATABASE … TEMPLATE (tens of milliseconds) instead of running
// the migrations. Databases are named test_<random> and dropped when the test ends.
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool, _ := pgtest.NewDB(t)
//		…
//	}
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
	"github.com/taskling-go/taskling/migrations"
)

// setupTimeout bounds the creation of a database, including a first start of the cluster and
// the template's migration.
const setupTimeout = 2 * time.Minute

var server struct {
	mu  sync.Mutex
	url string
}

// DatabaseURL returns the URL of the server tests use: $TASKLING_DATABASE_URL if set, else the
// private cluster's (started if needed). The answer is cached for the process.
func DatabaseURL(tb testing.TB) string {
	tb.Helper()
	server.mu.Lock()
	defer server.mu.Unlock()
	if server.url == "" {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		u, err := pgcluster.DatabaseURL(ctx)
		if err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
		server.url = u
	}
	return server.url
}

// NewDB creates a database holding the current schema and returns a pool connected to it and
// its URL. The pool is closed and the database dropped when the test ends.
func NewDB(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	return newDB(tb, true)
}

// NewEmptyDB is NewDB without the schema: a database fresh from template0, for migration tests.
func NewEmptyDB(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	return newDB(tb, false)
}

func newDB(tb testing.TB, migrated bool) (*pgxpool.Pool, string) {
	tb.Helper()
	serverURL := DatabaseURL(tb)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	db, err := CreateDatabase(ctx, serverURL, migrated)
	if err != nil {
		tb.Fatal(err)
	}
	// Cleanups run last-registered first: the pool closes before the database is dropped.
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	pool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		tb.Fatalf("pgtest: connect to %s: %v", db.Name, err)
	}
	tb.Cleanup(pool.Close)
	return pool, db.URL
}

// Database is a database made by CreateDatabase.
type Database struct {
	Name      string // test_<random>
	URL       string // serverURL with the database replaced
	serverURL string
}

// CreateDatabase creates a database on the server at serverURL (its database is the one the
// CREATE and DROP statements run in, normally "postgres"): a copy of the migrated template, or
// an empty one. It is for programs that want a throwaway database without a testing.TB (a
// benchmark, say); the caller drops it.
func CreateDatabase(ctx context.Context, serverURL string, migrated bool) (*Database, error) {
	source := "template0"
	if migrated {
		var err error
		if source, err = ensureTemplate(ctx, serverURL); err != nil {
			return nil, err
		}
	}
	name, err := randomName("test_")
	if err != nil {
		return nil, err
	}
	dbURL, err := withDatabase(serverURL, name)
	if err != nil {
		return nil, err
	}
	err = withConn(ctx, serverURL, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(source))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgtest: create database %s from %s: %w", name, source, err)
	}
	return &Database{Name: name, URL: dbURL, serverURL: serverURL}, nil
}

// Drop drops the database, disconnecting whoever is still connected. A server that is briefly
// down (a test restarted it) is retried until ctx ends.
func (d *Database) Drop(ctx context.Context) error {
	for {
		err := withConn(ctx, d.serverURL, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(d.Name)+" WITH (FORCE)")
			return err
		})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtest: drop database %s: %w", d.Name, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

var templates struct {
	mu   sync.Mutex
	done map[string]string // server URL → template name
}

// templateLockKey serializes template creation across processes ("tasktmpl" in ASCII).
const templateLockKey int64 = 0x7461736b746d706c

// ensureTemplate returns the name of the server's template for the embedded schema, creating it
// if no process has yet.
func ensureTemplate(ctx context.Context, serverURL string) (string, error) {
	templates.mu.Lock()
	defer templates.mu.Unlock()
	if name, ok := templates.done[serverURL]; ok {
		return name, nil
	}
	hash, err := migrations.Hash()
	if err != nil {
		return "", err
	}
	name := "taskling_tmpl_" + hash
	err = withConn(ctx, serverURL, func(conn *pgx.Conn) error {
		// A session lock, released when withConn closes the connection, even on a panic.
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
			return err
		}
		var isTemplate bool
		err := conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&isTemplate)
		switch {
		case err == nil && isTemplate:
			return nil
		case err == nil:
			// Left half-made by a process that died while migrating it.
			if _, err := conn.Exec(ctx, "DROP DATABASE "+ident(name)+" WITH (FORCE)"); err != nil {
				return err
			}
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		return createTemplate(ctx, conn, serverURL, name)
	})
	if err != nil {
		return "", fmt.Errorf("pgtest: template database %s: %w", name, err)
	}
	if templates.done == nil {
		templates.done = map[string]string{}
	}
	templates.done[serverURL] = name
	return name, nil
}

func createTemplate(ctx context.Context, conn *pgx.Conn, serverURL, name string) error {
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE template0"); err != nil {
		return err
	}
	tmplURL, err := withDatabase(serverURL, name)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, tmplURL)
	if err != nil {
		return err
	}
	err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		return err
	}
	// No connections: CREATE DATABASE … TEMPLATE fails while anyone is connected to the source.
	_, err = conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")
	return err
}

func withConn(ctx context.Context, connURL string, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return fn(conn)
}

// withDatabase returns connURL (a URL or a keyword/value string) naming database name instead.
func withDatabase(connURL, name string) (string, error) {
	if strings.HasPrefix(connURL, "postgres://") || strings.HasPrefix(connURL, "postgresql://") {
		u, err := url.Parse(connURL)
		if err != nil {
			return "", fmt.Errorf("pgtest: parse database URL: %w", err)
		}
		u.Path, u.RawPath = "/"+name, ""
		return u.String(), nil
	}
	// Keyword/value form: a later keyword overrides an earlier one.
	return connURL + " dbname=" + name, nil
}

// randomName returns prefix followed by 16 random lowercase hex digits: a valid identifier that
// needs no quoting.
func randomName(prefix string) (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("pgtest: random name: %w", err)
	}
	return prefix + hex.EncodeToString(b), nil
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }
