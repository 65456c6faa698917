package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/taskling-go/taskling/taskling"

	"github.com/taskling-go/taskling/integration_test/ledger"
)

// levelPoll is how often the level file is read: a switch reaches every start that begins this
// long after it (TestChaos waits for the starts already under way at the old level to end).
const levelPoll = 20 * time.Millisecond

// levelNames are the isolation levels, by taskling.Isolation.
var levelNames = [...]string{
	taskling.IsolationReadCommitted: ledger.IsolationReadCommitted,
	taskling.IsolationSerializable:  ledger.IsolationSerializable,
}

// levelSwitch (-isolation-file) holds one client per isolation level, on the same pool and
// settings, and the level in force, read from the file: the nemesis of TestChaos rewrites it (by
// rename, so a read sees the old or the new level whole) at the start of every round of faults.
// Each start takes the client of the level in force when it begins, and its grant names that
// level.
type levelSwitch struct {
	path    string
	clients [len(levelNames)]*taskling.Client
	cur     atomic.Int32 // index into levelNames and clients
}

// newLevelSwitch reads the level in force from path and polls it until stop ends; newClient
// makes the client of a level.
func newLevelSwitch(stop context.Context, path string, newClient func(taskling.Isolation) (*taskling.Client, error)) (*levelSwitch, error) {
	ls := &levelSwitch{path: path}
	i, err := ls.read()
	if err != nil {
		return nil, err
	}
	ls.cur.Store(int32(i))
	for iso := range ls.clients {
		if ls.clients[iso], err = newClient(taskling.Isolation(iso)); err != nil {
			ls.close()
			return nil, err
		}
	}
	go ls.poll(stop)
	return ls, nil
}

// read returns the level the file names.
func (ls *levelSwitch) read() (int, error) {
	b, err := os.ReadFile(ls.path)
	if err != nil {
		return 0, err
	}
	name := strings.TrimSpace(string(b))
	for i, n := range levelNames {
		if n == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("isolation file %s: unknown level %q", ls.path, name)
}

func (ls *levelSwitch) poll(stop context.Context) {
	t := time.NewTicker(levelPoll)
	defer t.Stop()
	for {
		select {
		case <-stop.Done():
			return
		case <-t.C:
		}
		if i, err := ls.read(); err == nil {
			ls.cur.Store(int32(i))
		}
	}
}

// pick returns the client of the level in force, and its name.
func (ls *levelSwitch) pick() (*taskling.Client, string) {
	i := ls.cur.Load()
	return ls.clients[i], levelNames[i]
}

// close closes the clients (holders of each finish first).
func (ls *levelSwitch) close() {
	for _, c := range ls.clients {
		if c != nil {
			c.Close()
		}
	}
}
