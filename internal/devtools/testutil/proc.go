package testutil

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// DescendantCommandLines returns the command lines of the processes descending from pid, as ps
// shows them to anyone on the machine (/proc/PID/cmdline, arguments joined by spaces). Linux
// only: elsewhere it returns an error.
func DescendantCommandLines(pid int) ([]string, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil || len(stats) == 0 {
		return nil, fmt.Errorf("testutil: no /proc to read processes from")
	}
	children := map[int][]int{}
	for _, stat := range stats {
		b, err := os.ReadFile(stat)
		if err != nil {
			continue // it exited
		}
		// "PID (COMM) STATE PPID …": COMM may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) < 2 {
			continue
		}
		child, err1 := strconv.Atoi(filepath.Base(filepath.Dir(stat)))
		parent, err2 := strconv.Atoi(fields[1])
		if err1 == nil && err2 == nil {
			children[parent] = append(children[parent], child)
		}
	}
	var lines []string
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		p := queue[0]
		queue = append(queue, children[p]...)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err != nil {
			continue
		}
		lines = append(lines, strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")))
	}
	return lines, nil
}

// RequireNoDatabaseURL fails the test if a command line holds a PostgreSQL URL or the password
// of dbURL: a URL on a command line is anyone's to read.
func RequireNoDatabaseURL(t testing.TB, dbURL string, commandLines []string) {
	t.Helper()
	password := ""
	if u, err := url.Parse(dbURL); err == nil {
		password, _ = u.User.Password()
	}
	for _, line := range commandLines {
		switch {
		case password != "" && strings.Contains(line, password):
			t.Errorf("a command line holds the database's password: %s", strings.ReplaceAll(line, password, "<password>"))
		case strings.Contains(line, "postgres://") || strings.Contains(line, "postgresql://"):
			t.Errorf("a command line holds a database URL: %s", line)
		}
	}
}
