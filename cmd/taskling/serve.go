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
		addr         string
		protectReads bool
		refresh      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve [--addr HOST:PORT] [--protect-reads]",
		Short: "Serve the HTTP JSON API, the web dashboard and /metrics",
		Long: `Serve the HTTP JSON API (/api/v1/), the web dashboard (/) and Prometheus metrics (/metrics).

Changes (PATCH and DELETE of /api/v1/tasks/{app}/{task}/overrides, and the dashboard's form)
need "Authorization: Bearer $TASKLING_API_TOKEN"; without TASKLING_API_TOKEN the server is
read-only. --protect-reads puts every read behind the token too. Stops on SIGINT or SIGTERM.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			token := e.getenv("TASKLING_API_TOKEN")
			if protectReads && token == "" {
				return usageErrorf("--protect-reads needs TASKLING_API_TOKEN")
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
			h, err := dashboard.NewHandler(client, &dashboard.Options{Token: token, ProtectReads: protectReads, Logger: log, RefreshInterval: refresh})
			if err != nil {
				return usageErrorf("%v", err)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return usageErrorf("--addr: %v", err)
			}
			mode := "read-only (no TASKLING_API_TOKEN)"
			if token != "" {
				mode = "changes allowed with the API token"
			}
			fmt.Fprintf(e.stderr, "taskling: serving on http://%s (%s)\n", ln.Addr(), mode)
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
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
	cmd.Flags().BoolVar(&protectReads, "protect-reads", false, "require the API token on reads too")
	cmd.Flags().DurationVar(&refresh, "refresh", 2*time.Second, "the dashboard's auto-refresh interval")
	return cmd
}
