package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/taskling-go/taskling/dashboard"
	"github.com/taskling-go/taskling/taskling"
)

func newServeCommand(e *env) *cobra.Command {
	var (
		addr          string
		protectReads  bool
		publicReads   bool
		publicMetrics bool
		refresh       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve [--addr HOST:PORT] [--public-reads | --public-metrics]",
		Short: "Serve the HTTP JSON API, the web dashboard and /metrics",
		Long: `Serve the HTTP JSON API (/api/v1/), the web dashboard (/) and Prometheus metrics (/metrics).

With TASKLING_API_TOKEN set (at least 32 bytes, e.g. from 'openssl rand -base64 32'), every
request needs it: scripts and Prometheus send "Authorization: Bearer $TASKLING_API_TOKEN", and
browsers sign in once on the dashboard. --public-reads serves reads (API, dashboard, /metrics)
without it; --public-metrics serves /metrics alone without it. Changes always need it. Without
TASKLING_API_TOKEN the server is read-only and every read is public.
Stops on SIGINT or SIGTERM.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			token := e.getenv("TASKLING_API_TOKEN")
			if n := len(token); n > 0 && n < dashboard.MinTokenLength {
				return usageErrorf("TASKLING_API_TOKEN is %d bytes; want at least %d (for example: openssl rand -base64 32)", n, dashboard.MinTokenLength)
			}
			if protectReads {
				fmt.Fprintln(e.stderr, "taskling: --protect-reads is deprecated and does nothing: reads are protected whenever TASKLING_API_TOKEN is set (--public-reads opens them)")
			}
			ctx := cmd.Context()
			cctx, cancel := context.WithTimeout(ctx, e.timeout)
			pool, err := e.connect(cctx)
			cancel()
			if err != nil {
				return err
			}
			defer pool.Close()
			client, err := taskling.NewClient(pool, &taskling.Config{HostName: hostName(e)})
			if err != nil {
				return err
			}
			defer client.Close()
			log, _ := zap.NewProduction()
			defer func() { _ = log.Sync() }()
			h, err := dashboard.NewHandler(client, &dashboard.Options{Token: token, PublicReads: publicReads, PublicMetrics: publicMetrics,
				Logger: log, RefreshInterval: refresh})
			if err != nil {
				return usageErrorf("%v", err)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return usageErrorf("--addr: %v", err)
			}
			fmt.Fprintf(e.stderr, "taskling: serving on http://%s (%s)\n", ln.Addr(), serveMode(token, publicReads, publicMetrics))
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
				WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return err
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				return err
			}
			if err := <-done; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "listen address")
	cmd.Flags().BoolVar(&publicReads, "public-reads", false, "serve reads (API, dashboard, /metrics) without the API token")
	cmd.Flags().BoolVar(&publicMetrics, "public-metrics", false, "serve /metrics without the API token")
	cmd.Flags().BoolVar(&protectReads, "protect-reads", false, "deprecated: reads are protected whenever TASKLING_API_TOKEN is set")
	_ = cmd.Flags().MarkHidden("protect-reads")
	cmd.Flags().DurationVar(&refresh, "refresh", 2*time.Second, "the dashboard's auto-refresh interval")
	return cmd
}

func serveMode(token string, publicReads, publicMetrics bool) string {
	switch {
	case token == "":
		return "read-only: no TASKLING_API_TOKEN, every read is public"
	case publicReads:
		return "reads public, changes need the API token"
	case publicMetrics:
		return "everything but /metrics needs the API token"
	}
	return "every request needs the API token"
}
