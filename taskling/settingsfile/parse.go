package settingsfile

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/taskling-go/taskling/taskling"
)

// ErrMalformed is wrapped by every error about the file's content; the message names the file,
// the line and the key.
var ErrMalformed = errors.New("settingsfile: malformed settings file")

// layer is one table of settings as written; nil fields are not set there.
type layer struct {
	ConcurrencyLimit        *int    `toml:"concurrency_limit"`
	Disabled                *bool   `toml:"disabled"`
	DeathMode               *string `toml:"death_mode"`
	KeepAliveInterval       *string `toml:"keep_alive_interval"`
	KeepAliveDeathThreshold *string `toml:"keep_alive_death_threshold"`
	OverrideThreshold       *string `toml:"override_threshold"`
	LeaseSafetyMargin       *string `toml:"lease_safety_margin"`
	KeepCompleted           *string `toml:"keep_completed"`
	KeepFailed              *string `toml:"keep_failed"`
	KeepBlocked             *string `toml:"keep_blocked"`
	KeyLimit                *int    `toml:"key_limit"`
	// Rate and KeyRate are rates as taskling.ParseRate reads them ("100/1m", "none").
	Rate    *string `toml:"rate"`
	KeyRate *string `toml:"key_rate"`
	// Keys are named keys' own settings ([….keys.KEY]), at any layer.
	Keys map[string]keyLayer `toml:"keys"`
}

// keyLayer is a named key's settings as written.
type keyLayer struct {
	Limit *int    `toml:"limit"`
	Rate  *string `toml:"rate"`
}

type appTable struct {
	layer
	Tasks map[string]layer `toml:"tasks"`
}

type document struct {
	Defaults     layer               `toml:"defaults"`
	Applications map[string]appTable `toml:"applications"`
}

// setting is one layer's settings, decoded: set says which fields the table sets.
type setting struct {
	taskling.TaskSettings
	disabledSet bool
	keyLimitSet bool // key_limit = 0 (no key limit) set here, over a limit below
	rateSet     bool // rate = "none" set here, over a rate below
	keyRateSet  bool // key_rate = "none" set here
}

// over returns s with the fields that top sets replacing it.
func (s setting) over(top setting) setting {
	t := top.TaskSettings
	if t.ConcurrencyLimit != 0 {
		s.ConcurrencyLimit = t.ConcurrencyLimit
	}
	if top.disabledSet {
		s.Disabled, s.disabledSet = t.Disabled, true
	}
	if t.DeathMode != 0 {
		s.DeathMode = t.DeathMode
	}
	if t.KeyLimit != 0 || top.keyLimitSet {
		s.KeyLimit, s.keyLimitSet = t.KeyLimit, true
	}
	if !t.Rate.IsZero() || top.rateSet {
		s.Rate, s.rateSet = t.Rate, true
	}
	if !t.KeyRate.IsZero() || top.keyRateSet {
		s.KeyRate, s.keyRateSet = t.KeyRate, true
	}
	if len(t.Keys) > 0 {
		keys := maps.Clone(s.Keys)
		if keys == nil {
			keys = map[string]taskling.KeySettings{}
		}
		maps.Copy(keys, t.Keys)
		s.Keys = keys
	}
	for _, f := range []struct{ dst, src *time.Duration }{{&s.KeepAliveInterval, &t.KeepAliveInterval},
		{&s.KeepAliveDeathThreshold, &t.KeepAliveDeathThreshold}, {&s.OverrideThreshold, &t.OverrideThreshold},
		{&s.LeaseSafetyMargin, &t.LeaseSafetyMargin}, {&s.KeepCompleted, &t.KeepCompleted},
		{&s.KeepFailed, &t.KeepFailed}, {&s.KeepBlocked, &t.KeepBlocked}} {
		if *f.src != 0 {
			*f.dst = *f.src
		}
	}
	return s
}

// file is a settings file as read.
type file struct {
	defaults setting
	apps     map[string]setting
	tasks    map[[2]string]setting
}

func (f *file) task(app, task string) taskling.TaskSettings {
	s := f.defaults.over(f.apps[app]).over(f.tasks[[2]string{app, task}])
	return s.TaskSettings
}

// decodeErr is how the TOML decoder reports a value of the wrong type.
var decodeErr = regexp.MustCompile(`line (\d+) \(last key "([^"]*)"\): (.*)`)

// MaxFileSize is the largest settings file read, in bytes (1 MiB): a larger one is refused
// before it is parsed (a symlink to /dev/zero or a huge file must not exhaust memory).
const MaxFileSize = 1 << 20

// readCapped reads the regular file that path resolves to, at most MaxFileSize bytes.
func readCapped(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below); reads of a
	// regular file ignore the flag.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("settingsfile: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, fmt.Errorf("settingsfile: %w", err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("settingsfile: %s is not a regular file (mode %s)", path, fi.Mode())
	case fi.Size() > MaxFileSize:
		return nil, fmt.Errorf("settingsfile: %s is %d bytes; at most %d bytes (1 MiB) allowed", path, fi.Size(), MaxFileSize)
	}
	// It may grow between the Stat and the read: read one byte past the cap at most.
	text, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("settingsfile: read %s: %w", path, err)
	}
	if len(text) > MaxFileSize {
		return nil, fmt.Errorf("settingsfile: %s is over %d bytes; at most %d bytes (1 MiB) allowed", path, MaxFileSize, MaxFileSize)
	}
	return text, nil
}

// load reads and checks the file at path.
func load(path string) (*file, error) {
	text, err := readCapped(path)
	if err != nil {
		return nil, err
	}
	lines := keyLines(string(text))
	bad := func(key []string, format string, args ...any) error {
		return fmt.Errorf("%w: %s:%d: %s: %s", ErrMalformed, path, lines.find(key), strings.Join(quoteKey(key), "."), fmt.Sprintf(format, args...))
	}
	var doc document
	md, err := toml.Decode(string(text), &doc)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%w: %s:%d: %s", ErrMalformed, path, pe.Position.Line, pe.Message)
		}
		if m := decodeErr.FindStringSubmatch(err.Error()); m != nil { // a value of the wrong type
			return nil, fmt.Errorf("%w: %s:%s: %s: %s", ErrMalformed, path, m[1], m[2], m[3])
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, path, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		k := undecoded[0]
		return nil, bad([]string(k), "unknown key; want [defaults], [applications.APP] or [applications.APP.tasks.TASK] with concurrency_limit, disabled, death_mode, keep_alive_interval, keep_alive_death_threshold, override_threshold, lease_safety_margin, keep_completed, keep_failed, keep_blocked, key_limit, rate, key_rate, or [….keys.KEY] with limit and rate")
	}
	f := &file{apps: map[string]setting{}, tasks: map[[2]string]setting{}}
	check := func(table []string, l layer) (setting, error) {
		s, err := decodeLayer(table, l, bad)
		if err != nil {
			return s, err
		}
		return s, nil
	}
	if f.defaults, err = check([]string{"defaults"}, doc.Defaults); err != nil {
		return nil, err
	}
	for app, a := range doc.Applications {
		table := []string{"applications", app}
		if f.apps[app], err = check(table, a.layer); err != nil {
			return nil, err
		}
		for task, t := range a.Tasks {
			if f.tasks[[2]string{app, task}], err = check(append(table, "tasks", task), t); err != nil {
				return nil, err
			}
		}
	}
	// Every combination a start would see must be accepted, or that start would fail: refuse the
	// file instead, so that the last good settings stay.
	combos := map[string]func() taskling.TaskSettings{"defaults": func() taskling.TaskSettings { return f.defaults.TaskSettings }}
	tables := map[string][]string{"defaults": {"defaults"}}
	for app := range doc.Applications {
		k := "a\x00" + app
		combos[k] = func() taskling.TaskSettings { return f.defaults.over(f.apps[app]).TaskSettings }
		tables[k] = []string{"applications", app}
		for task := range doc.Applications[app].Tasks {
			k := "t\x00" + app + "\x00" + task
			combos[k] = func() taskling.TaskSettings { return f.task(app, task) }
			tables[k] = []string{"applications", app, "tasks", task}
		}
	}
	for k, settings := range combos {
		if err := settings().Validate(); err != nil {
			return nil, bad(tables[k], "these settings, with the layers below them, are refused: %v", err)
		}
	}
	return f, nil
}

// decodeLayer converts one table's values, naming the key of a bad one.
func decodeLayer(table []string, l layer, bad func([]string, string, ...any) error) (setting, error) {
	var s setting
	key := func(name string) []string { return append(append([]string{}, table...), name) }
	if v := l.ConcurrencyLimit; v != nil {
		if *v != -1 && (*v < 1 || *v > taskling.MaxConcurrencyLimit) {
			return s, bad(key("concurrency_limit"), "is %d; want -1 (unlimited) or 1 to %d", *v, taskling.MaxConcurrencyLimit)
		}
		s.ConcurrencyLimit = *v
	}
	if v := l.Disabled; v != nil {
		s.Disabled, s.disabledSet = *v, true
	}
	if v := l.KeyLimit; v != nil {
		if *v < 0 || *v > taskling.MaxConcurrencyLimit {
			return s, bad(key("key_limit"), "is %d; want 0 (no key limit) or 1 to %d", *v, taskling.MaxConcurrencyLimit)
		}
		s.KeyLimit, s.keyLimitSet = *v, true
	}
	if len(l.Keys) > taskling.MaxNamedKeys {
		return s, bad(key("keys"), "names %d keys; at most %d allowed", len(l.Keys), taskling.MaxNamedKeys)
	}
	for name, k := range l.Keys {
		at := append(key("keys"), name, "limit")
		if err := taskling.ValidateKey("key", name); err != nil {
			return s, bad(at[:len(at)-1], "%v", err)
		}
		var ks taskling.KeySettings
		var err error
		if ks.Rate, err = rateOf(append(key("keys"), name, "rate"), k.Rate, bad); err != nil {
			return s, err
		}
		switch {
		case k.Limit != nil && *k.Limit >= 1 && *k.Limit <= taskling.MaxConcurrencyLimit:
			ks.Limit = *k.Limit
		case k.Limit == nil && !ks.Rate.IsZero(): // named for its rate only: its limit is KeyLimit's
		default:
			got := "missing"
			if k.Limit != nil {
				got = fmt.Sprint(*k.Limit)
			}
			return s, bad(at, "is %s; want 1 to %d (or a rate beside it)", got, taskling.MaxConcurrencyLimit)
		}
		if s.Keys == nil {
			s.Keys = map[string]taskling.KeySettings{}
		}
		s.Keys[name] = ks
	}
	var err error
	if s.Rate, err = rateOf(key("rate"), l.Rate, bad); err != nil {
		return s, err
	}
	if s.KeyRate, err = rateOf(key("key_rate"), l.KeyRate, bad); err != nil {
		return s, err
	}
	s.rateSet, s.keyRateSet = l.Rate != nil, l.KeyRate != nil
	if v := l.DeathMode; v != nil {
		switch *v {
		case "keepalive":
			s.DeathMode = taskling.DeathModeKeepAlive
		case "override":
			s.DeathMode = taskling.DeathModeOverride
		default:
			return s, bad(key("death_mode"), "is %q; want \"keepalive\" or \"override\"", *v)
		}
	}
	for _, d := range []struct {
		name string
		v    *string
		dst  *time.Duration
	}{{"keep_alive_interval", l.KeepAliveInterval, &s.KeepAliveInterval}, {"keep_alive_death_threshold", l.KeepAliveDeathThreshold, &s.KeepAliveDeathThreshold},
		{"override_threshold", l.OverrideThreshold, &s.OverrideThreshold}, {"lease_safety_margin", l.LeaseSafetyMargin, &s.LeaseSafetyMargin}} {
		if d.v == nil {
			continue
		}
		v, err := time.ParseDuration(*d.v)
		if err != nil || v <= 0 {
			return s, bad(key(d.name), "is %q; want a positive duration such as \"30s\" or \"2h\"", *d.v)
		}
		*d.dst = v
	}
	for _, d := range []struct {
		name string
		v    *string
		dst  *time.Duration
	}{{"keep_completed", l.KeepCompleted, &s.KeepCompleted}, {"keep_failed", l.KeepFailed, &s.KeepFailed},
		{"keep_blocked", l.KeepBlocked, &s.KeepBlocked}} {
		if d.v == nil {
			continue
		}
		v, err := taskling.ParseKeep(*d.v)
		if err != nil {
			return s, bad(key(d.name), "is %q; want \"forever\", days such as \"14d\" or a duration of at least %s", *d.v, taskling.MinKeep)
		}
		*d.dst = v
	}
	if err := s.TaskSettings.Validate(); err != nil {
		return s, bad(table, "%v", err)
	}
	return s, nil
}

// rateOf reads a rate value (nil: not set), naming its key when it is bad.
func rateOf(at []string, v *string, bad func([]string, string, ...any) error) (taskling.Rate, error) {
	if v == nil {
		return taskling.Rate{}, nil
	}
	if strings.TrimSpace(*v) == "" {
		return taskling.Rate{}, bad(at, `is empty; want a rate such as "100/1m" or "500/1s,burst=50", or "none"`)
	}
	r, err := taskling.ParseRate(*v)
	if err != nil {
		return r, bad(at, "is %q: %v", *v, strings.TrimPrefix(err.Error(), taskling.ErrInvalidSettings.Error()+": "))
	}
	return r, nil
}

// lineIndex maps a key path (NUL-joined) to the line that sets it, and a table to its header's.
type lineIndex map[string]int

func (ix lineIndex) find(key []string) int {
	for n := len(key); n > 0; n-- { // the key, or the nearest table that holds it
		if line, ok := ix[strings.Join(key[:n], "\x00")]; ok {
			return line
		}
	}
	return 1
}

// keyLines indexes the lines of a TOML text by the key paths they set: enough to name a line in
// an error (TOML's decoder reports lines for syntax errors only).
func keyLines(text string) lineIndex {
	ix := lineIndex{}
	var table []string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			header := strings.Trim(strings.SplitN(line, "#", 2)[0], " []")
			table = splitKey(header)
			if _, seen := ix[strings.Join(table, "\x00")]; !seen {
				ix[strings.Join(table, "\x00")] = i + 1
			}
		default:
			if eq := strings.IndexByte(line, '='); eq > 0 {
				k := append(append([]string{}, table...), splitKey(strings.TrimSpace(line[:eq]))...)
				ix[strings.Join(k, "\x00")] = i + 1
			}
		}
	}
	return ix
}

// splitKey splits a dotted TOML key, honouring quotes.
func splitKey(s string) []string {
	var parts []string
	var cur strings.Builder
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '"' || c == '\'':
			quote = c
		case c == '.':
			parts = append(parts, strings.TrimSpace(cur.String()))
			cur.Reset()
		case c == ' ' || c == '\t':
		default:
			cur.WriteByte(c)
		}
	}
	return append(parts, strings.TrimSpace(cur.String()))
}

// quoteKey writes a key path as TOML would, quoting parts that are not bare keys.
func quoteKey(key []string) []string {
	out := make([]string, len(key))
	for i, k := range key {
		out[i] = k
		if k == "" || strings.IndexFunc(k, func(r rune) bool {
			return !(r == '_' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) >= 0 {
			out[i] = fmt.Sprintf("%q", k)
		}
	}
	return out
}
