package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/taskling-go/taskling/migrations"
)

func newMigrateCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Create or upgrade the schema, or show its state"}
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Apply every migration not applied yet (safe when many hosts run it at once)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.migrate(cmd.Context(), true)
		},
	}, &cobra.Command{
		Use:   "status",
		Short: "List the migrations and whether each is applied; exit 5 if some are not",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.migrate(cmd.Context(), false)
		},
	})
	return cmd
}

// migrationJSON is one migration in --output json.
type migrationJSON struct {
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	Applied   bool       `json:"applied"`
	AppliedAt *time.Time `json:"applied_at"`
}

func (e *env) migrate(ctx context.Context, up bool) error {
	return e.withPool(ctx, func(ctx context.Context, pool *pgxpool.Pool) error { return e.migrateOn(ctx, pool, up) })
}

func (e *env) migrateOn(ctx context.Context, pool *pgxpool.Pool, up bool) error {
	if up {
		if err := migrations.Up(ctx, pool); err != nil {
			return err
		}
	}
	status, err := migrations.Status(ctx, pool)
	if err != nil {
		return err
	}
	pending := 0
	out := make([]migrationJSON, len(status))
	for i, m := range status {
		out[i] = migrationJSON{Version: m.Version, Name: m.Name, Applied: m.Applied}
		if m.Applied {
			at := m.AppliedAt
			out[i].AppliedAt = &at
		} else {
			pending++
		}
	}
	if e.output == "json" {
		if err := printJSON(e.stdout, map[string]any{"migrations": out}); err != nil {
			return err
		}
	} else {
		t := newTable(e.stdout, "VERSION", "NAME", "APPLIED")
		for _, m := range out {
			applied := "pending"
			if m.AppliedAt != nil {
				applied = clock(*m.AppliedAt)
			}
			t.row(fmt.Sprintf("%04d", m.Version), m.Name, applied)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if pending > 0 && !up {
		return &exitError{code: exitPending, err: fmt.Errorf("%d migrations pending", pending)}
	}
	return nil
}
