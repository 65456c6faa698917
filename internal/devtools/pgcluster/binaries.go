package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrNoBinaries means initdb and pg_ctl were found in no directory searched.
var ErrNoBinaries = errors.New("pgcluster: PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin; install Debian's postgresql package or set TASKLING_DATABASE_URL")

// debianRoot is where Debian's postgresql-<ver> packages put the server binaries, off PATH.
const debianRoot = "/usr/lib/postgresql"

// defaultSearchPath is $PATH, then /usr/lib/postgresql/<version>/bin, highest version first.
func defaultSearchPath() []string {
	dirs := filepath.SplitList(os.Getenv("PATH"))
	entries, _ := os.ReadDir(debianRoot)
	var versions []string
	for _, e := range entries {
		if _, err := strconv.ParseFloat(e.Name(), 64); err == nil {
			versions = append(versions, e.Name())
		}
	}
	sort.Slice(versions, func(i, j int) bool { return versionLess(versions[j], versions[i]) })
	for _, v := range versions {
		dirs = append(dirs, filepath.Join(debianRoot, v, "bin"))
	}
	return dirs
}

// versionLess orders "9.6" < "10" < "15".
func versionLess(a, b string) bool {
	x, _ := strconv.ParseFloat(a, 64)
	y, _ := strconv.ParseFloat(b, 64)
	return x < y
}

// findBinaries returns the paths of initdb and pg_ctl from the first directory holding both, so
// that the two always come from one PostgreSQL version.
func findBinaries(searchPath []string) (initdb, pgCtl string, err error) {
	for _, dir := range searchPath {
		if dir == "" {
			continue
		}
		i, p := filepath.Join(dir, "initdb"), filepath.Join(dir, "pg_ctl")
		if isExecutable(i) && isExecutable(p) {
			return i, p, nil
		}
	}
	return "", "", ErrNoBinaries
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// majorVersion extracts the major version from `pg_ctl --version` output, e.g.
// "pg_ctl (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)" → "15".
func majorVersion(versionOutput string) (string, error) {
	fields := strings.Fields(versionOutput)
	for i, f := range fields {
		if f == "(PostgreSQL)" && i+1 < len(fields) {
			v := fields[i+1]
			major, _, _ := strings.Cut(v, ".")
			if n, err := strconv.Atoi(major); err == nil && n < 10 {
				// 9.6 and older: the major version has two parts.
				if rest := strings.SplitN(v, ".", 3); len(rest) >= 2 {
					return rest[0] + "." + rest[1], nil
				}
			}
			return major, nil
		}
	}
	return "", fmt.Errorf("pgcluster: cannot read a version from %q", strings.TrimSpace(versionOutput))
}
