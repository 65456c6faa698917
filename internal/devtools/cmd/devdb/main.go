// Command devdb starts, stops and reports the private PostgreSQL cluster (package
// internal/devtools/pgcluster) that `make test`, `make demo` and friends use.
//
//	devdb start                 start the cluster (or reuse the running one); print its URL
//	devdb start -lease PID      the same, holding a lease for process PID (scripts/with-db.sh)
//	devdb release PID           drop PID's lease; stop the cluster if a lease holder started it
//	                            and no other live lease remains
//	devdb url                   print the running cluster's URL; exit 1 if it is not running
//	devdb status                say whether it runs, where, and on which port
//	devdb stop                  stop it (fast) and say so, or say that it was not running
//	devdb restart-immediate     crash it (pg_ctl stop -m immediate) and start it on the same port
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/taskling-go/taskling/internal/devtools/pgcluster"
)

const usage = `usage: devdb start [-lease PID] | release PID | url | status | stop | restart-immediate`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "devdb:", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "start":
		fs := flag.NewFlagSet("start", flag.ContinueOnError)
		lease := fs.Int("lease", 0, "hold a lease for this process id")
		if err := fs.Parse(rest); err != nil {
			return err
		}
		var c *pgcluster.Cluster
		var err error
		if *lease > 0 {
			c, err = pgcluster.AcquireLease(ctx, nil, *lease)
		} else {
			c, err = pgcluster.Ensure(ctx, nil)
		}
		if err != nil {
			return err
		}
		verb := "reusing the running"
		if c.Started() {
			verb = "started the"
		}
		fmt.Fprintf(os.Stderr, "devdb: %s cluster in %s (port %d)\n", verb, c.Dir(), c.Port())
		fmt.Println(c.URL())
	case "release":
		if len(rest) != 1 {
			return fmt.Errorf("release needs a process id\n%s", usage)
		}
		pid, err := strconv.Atoi(rest[0])
		if err != nil {
			return fmt.Errorf("release: bad process id %q", rest[0])
		}
		stopped, err := pgcluster.ReleaseLease(ctx, nil, pid)
		if err != nil {
			return err
		}
		if stopped {
			fmt.Fprintln(os.Stderr, "devdb: stopped the cluster")
		}
	case "url", "status":
		c, err := pgcluster.Open(nil)
		if err != nil {
			return err
		}
		running := c.Running(ctx)
		if cmd == "url" {
			if !running {
				return fmt.Errorf("the cluster in %s is not running (devdb start)", c.Dir())
			}
			fmt.Println(c.URL())
			return nil
		}
		if running {
			fmt.Printf("running in %s on port %d: %s\n", c.Dir(), c.Port(), c.URL())
		} else {
			fmt.Printf("not running (%s)\n", c.Dir())
		}
	case "stop":
		c, err := pgcluster.Open(nil)
		if err != nil {
			return err
		}
		stopped, err := c.StopRunning(ctx)
		if err != nil {
			return err
		}
		if stopped {
			fmt.Printf("stopped the cluster in %s\n", c.Dir())
		} else {
			fmt.Printf("no cluster running in %s\n", c.Dir())
		}
	case "restart-immediate":
		c, err := pgcluster.Open(nil)
		if err != nil {
			return err
		}
		if err := c.Restart(ctx, pgcluster.StopImmediate); err != nil {
			return err
		}
		fmt.Println(c.URL())
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
	return nil
}
