package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

//go:embed sql/*.sql
var files embed.FS

// advisoryLockKey serializes migrations across hosts ("taskling" in ASCII, as an int64).
const advisoryLockKey int64 = 0x7461736b6c696e67

// ErrChecksumMismatch means an applied migration's stored checksum differs from the embedded file:
// the file was edited after it was applied, or the database belongs to another version.
var ErrChecksumMismatch = errors.New("migrations: applied migration differs from the embedded file")

// Migration is one embedded SQL file.
type Migration struct {
	Version  int
	Name     string
	SQL      string
	Checksum string // hex SHA-256 of SQL
}

// Applied describes the state of one migration in a database.
type Applied struct {
	Migration
	Applied   bool
	AppliedAt time.Time // zero when not applied
}

// Executor is what Up needs: a *pgxpool.Pool, a *pgx.Conn, or anything else that can begin a
// transaction.
type Executor interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	return load(files)
}

func load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, "sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: read embedded files: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		version, name, err := parseFileName(e.Name())
		if err != nil {
			return nil, err
		}
		if prev, ok := seen[version]; ok {
			return nil, fmt.Errorf("migrations: version %d used by both %s and %s", version, prev, e.Name())
		}
		seen[version] = e.Name()
		body, err := fs.ReadFile(fsys, path.Join("sql", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", e.Name(), err)
		}
		sum := sha256.Sum256(body)
		out = append(out, Migration{Version: version, Name: name, SQL: string(body), Checksum: hex.EncodeToString(sum[:])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// parseFileName splits "0001_core.sql" into (1, "core").
func parseFileName(file string) (int, string, error) {
	base := strings.TrimSuffix(file, ".sql")
	num, name, ok := strings.Cut(base, "_")
	if !ok || name == "" {
		return 0, "", fmt.Errorf("migrations: file name %q is not of the form NNNN_name.sql", file)
	}
	version, err := strconv.Atoi(num)
	if err != nil || version <= 0 {
		return 0, "", fmt.Errorf("migrations: file name %q does not start with a positive version number", file)
	}
	return version, name, nil
}

// Hash identifies the embedded schema: it changes whenever a migration is added or edited. Test
// helpers use it to name template databases.
func Hash() (string, error) {
	all, err := All()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range all {
		fmt.Fprintf(h, "%d:%s\n", m.Version, m.Checksum)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

const bootstrapSQL = `
CREATE SCHEMA IF NOT EXISTS taskling;
CREATE TABLE IF NOT EXISTS taskling.schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Up applies every embedded migration that the database lacks. It is idempotent and safe to call
// from many hosts at once. It returns ErrChecksumMismatch (wrapped, naming the file) when an
// applied migration differs from the embedded one, before applying anything newer.
func Up(ctx context.Context, db Executor) error {
	return UpTo(ctx, db, -1)
}

// UpTo is Up, but stops after version (a negative version means all). It serves rolling
// upgrades and tests that upgrade a database holding the data of an older version.
func UpTo(ctx context.Context, db Executor, version int) error {
	all, err := All()
	if err != nil {
		return err
	}
	for _, m := range all {
		if version >= 0 && m.Version > version {
			break
		}
		if err := apply(ctx, db, m); err != nil {
			return err
		}
	}
	return nil
}

func apply(ctx context.Context, db Executor, m Migration) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", advisoryLockKey); err != nil {
			return fmt.Errorf("migrations: take advisory lock: %w", err)
		}
		if _, err := tx.Exec(ctx, bootstrapSQL); err != nil {
			return fmt.Errorf("migrations: create version table: %w", err)
		}
		var stored string
		err := tx.QueryRow(ctx, "SELECT checksum FROM taskling.schema_migrations WHERE version = $1", m.Version).Scan(&stored)
		switch {
		case err == nil:
			if stored != m.Checksum {
				return fmt.Errorf("%w: %04d_%s.sql (stored checksum %s, embedded %s)", ErrChecksumMismatch, m.Version, m.Name, stored, m.Checksum)
			}
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("migrations: read version %d: %w", m.Version, err)
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrations: apply %04d_%s.sql: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO taskling.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)", m.Version, m.Name, m.Checksum); err != nil {
			return fmt.Errorf("migrations: record version %d: %w", m.Version, err)
		}
		return nil
	})
}

// Status reports every embedded migration and whether the database has applied it. It writes
// nothing: a database never migrated reports every migration as not applied.
func Status(ctx context.Context, db Executor) ([]Applied, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	out := make([]Applied, len(all))
	for i, m := range all {
		out[i].Migration = m
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass('taskling.schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return nil
		}
		rows, err := tx.Query(ctx, "SELECT version, checksum, applied_at FROM taskling.schema_migrations")
		if err != nil {
			return err
		}
		defer rows.Close()
		byVersion := map[int]int{}
		for i, m := range all {
			byVersion[m.Version] = i
		}
		for rows.Next() {
			var version int
			var checksum string
			var at time.Time
			if err := rows.Scan(&version, &checksum, &at); err != nil {
				return err
			}
			i, ok := byVersion[version]
			if !ok {
				continue // applied by a newer version of the library
			}
			if checksum != all[i].Checksum {
				return fmt.Errorf("%w: %04d_%s.sql", ErrChecksumMismatch, version, all[i].Name)
			}
			out[i].Applied, out[i].AppliedAt = true, at
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	return out, nil
}
