package execution

import (
	"errors"
	"fmt"
	"time"
)

// Death modes as stored in death_mode columns: taskling.DeathMode's values.
const (
	modeKeepAlive int16 = 1 // dead when the DB clock passes the last heartbeat + KeepAliveDeathThreshold
	modeOverride  int16 = 2 // dead when the DB clock passes the start + OverrideThreshold
)

// ErrInvalidSettings is wrapped by every settings validation error.
var ErrInvalidSettings = errors.New("invalid settings")

// SettingsError is a settings validation error naming the setting at fault (Field, as
// taskling.TaskSettings names it). It matches ErrInvalidSettings.
type SettingsError struct {
	Field string
	msg   string
}

func (e *SettingsError) Error() string        { return ErrInvalidSettings.Error() + ": " + e.msg }
func (e *SettingsError) Is(target error) bool { return target == ErrInvalidSettings }

// invalid returns a *SettingsError about field.
func invalid(field, format string, args ...any) error {
	return &SettingsError{Field: field, msg: fmt.Sprintf(format, args...)}
}

// Bounds of the settings (taskling re-exports them).
const (
	// MaxConcurrencyLimit bounds a limit: the token list (about 50 bytes a slot) is rewritten by
	// every acquire under the task row's lock.
	MaxConcurrencyLimit = 10000
	// MinKeepAliveInterval bounds the heartbeat rate from above.
	MinKeepAliveInterval = 50 * time.Millisecond
	// MaxKeepAliveInterval: a holder silent longer is not worth a slot (and a typo such as
	// "1000000h" would make the task's holders immortal).
	MaxKeepAliveInterval = time.Hour
	// MinThreshold is the shortest KeepAliveDeathThreshold or OverrideThreshold.
	MinThreshold = 250 * time.Millisecond
	// MaxThreshold is the longest KeepAliveDeathThreshold or OverrideThreshold: a slot of a holder
	// that died is given back within a day.
	MaxThreshold = 24 * time.Hour
)

// checkLimit checks a concurrency limit; in names the layer it came from.
func checkLimit(limit int, in string) error {
	if limit != -1 && (limit < 1 || limit > MaxConcurrencyLimit) {
		return invalid("ConcurrencyLimit", "ConcurrencyLimit%s is %d; want -1 (unlimited) or 1 to %d", in, limit, MaxConcurrencyLimit)
	}
	return nil
}

// checkMin checks that a duration setting is at least min.
func checkMin(field, in string, d, min time.Duration) error {
	if d < min {
		return invalid(field, "%s%s is %s; want at least %s", field, in, d, min)
	}
	return nil
}

// checkRange checks that a duration setting is within [min, max].
func checkRange(field, in string, d, min, max time.Duration) error {
	if d > max {
		return invalid(field, "%s%s is %s; want at most %s", field, in, d, max)
	}
	return checkMin(field, in, d, min)
}

// bounds are the limits of each duration setting of the liveness rules.
var bounds = map[string][2]time.Duration{
	"KeepAliveInterval":       {MinKeepAliveInterval, MaxKeepAliveInterval},
	"KeepAliveDeathThreshold": {MinThreshold, MaxThreshold},
	"OverrideThreshold":       {MinThreshold, MaxThreshold},
}

// Settings are the complete, effective settings of a task: every field is set.
type Settings struct {
	ConcurrencyLimit int // -1 unlimited, or >= 1
	Enabled          bool
	// DeathMode is 1 (keep-alive) or 2 (override), as taskling.DeathMode numbers them.
	DeathMode               int16
	KeepAliveInterval       time.Duration
	KeepAliveDeathThreshold time.Duration
	OverrideThreshold       time.Duration
	// Retention is not used by token transactions: hosts declare it to taskling.retention.
	Retention Retention
}

// KeepAlive reports whether holders are judged by their heartbeats (else by their start time).
func (s Settings) KeepAlive() bool { return s.DeathMode == modeKeepAlive }

// Validate reports the first invalid field, naming it. source says where the value came from
// (for example "operator override"), so that an operator sees which layer to fix.
func (s Settings) Validate(source string) error {
	return s.validate(func(string) string { return source })
}

// validate checks s; from names the source of each field's value ("" for none in particular).
func (s Settings) validate(from func(field string) string) error {
	in := func(field string) string {
		if f := from(field); f != "" {
			return " (" + f + ")"
		}
		return ""
	}
	// value names a field with its value and source, for a rule that ties two fields.
	value := func(field string, d time.Duration) string {
		if f := from(field); f != "" {
			return fmt.Sprintf("%s (%s, %s)", field, d, f)
		}
		return fmt.Sprintf("%s (%s)", field, d)
	}
	if err := checkLimit(s.ConcurrencyLimit, in("ConcurrencyLimit")); err != nil {
		return err
	}
	if s.DeathMode != modeKeepAlive && s.DeathMode != modeOverride {
		return invalid("DeathMode", "DeathMode%s is %d; want DeathModeKeepAlive or DeathModeOverride", in("DeathMode"), s.DeathMode)
	}
	if s.Retention != (Retention{}) {
		if err := s.Retention.Validate(in("Retention")); err != nil {
			return err
		}
	}
	if s.DeathMode == modeOverride {
		if s.OverrideThreshold <= 0 {
			// The mode is at fault when it was set elsewhere than the missing threshold.
			field := "OverrideThreshold"
			if from("DeathMode") != from(field) {
				field = "DeathMode"
			}
			return invalid(field, "OverrideThreshold%s is %s; DeathModeOverride%s needs one above zero",
				in("OverrideThreshold"), s.OverrideThreshold, in("DeathMode"))
		}
		b := bounds["OverrideThreshold"]
		return checkRange("OverrideThreshold", in("OverrideThreshold"), s.OverrideThreshold, b[0], b[1])
	}
	for _, f := range []struct {
		field string
		d     time.Duration
	}{{"KeepAliveInterval", s.KeepAliveInterval}, {"KeepAliveDeathThreshold", s.KeepAliveDeathThreshold}} {
		if err := checkRange(f.field, in(f.field), f.d, bounds[f.field][0], bounds[f.field][1]); err != nil {
			return err
		}
	}
	if s.KeepAliveDeathThreshold < 2*s.KeepAliveInterval {
		field := "KeepAliveDeathThreshold"
		if from("KeepAliveInterval") == overrideSource && from(field) != overrideSource {
			field = "KeepAliveInterval" // the override made it so
		}
		return invalid(field, "%s must be at least twice %s", value("KeepAliveDeathThreshold", s.KeepAliveDeathThreshold),
			value("KeepAliveInterval", s.KeepAliveInterval))
	}
	return nil
}

// Threshold is the time after which a silent holder is judged dead in its death mode.
func (s Settings) Threshold() time.Duration {
	if s.DeathMode == modeOverride {
		return s.OverrideThreshold
	}
	return s.KeepAliveDeathThreshold
}

// Overrides are an operator's settings stored in the task row; nil fields are not overridden.
type Overrides struct {
	ConcurrencyLimit        *int
	Enabled                 *bool
	DeathMode               *int16
	KeepAliveInterval       *time.Duration
	KeepAliveDeathThreshold *time.Duration
	OverrideThreshold       *time.Duration
	UpdatedAt               *time.Time
}

// IsZero reports whether no setting is overridden.
func (o Overrides) IsZero() bool {
	return o.ConcurrencyLimit == nil && o.Enabled == nil && o.DeathMode == nil &&
		o.KeepAliveInterval == nil && o.KeepAliveDeathThreshold == nil && o.OverrideThreshold == nil
}

// Apply returns declared with every overridden field replaced.
func (o Overrides) Apply(declared Settings) Settings {
	s := declared
	if o.ConcurrencyLimit != nil {
		s.ConcurrencyLimit = *o.ConcurrencyLimit
	}
	if o.Enabled != nil {
		s.Enabled = *o.Enabled
	}
	if o.DeathMode != nil {
		s.DeathMode = *o.DeathMode
	}
	if o.KeepAliveInterval != nil {
		s.KeepAliveInterval = *o.KeepAliveInterval
	}
	if o.KeepAliveDeathThreshold != nil {
		s.KeepAliveDeathThreshold = *o.KeepAliveDeathThreshold
	}
	if o.OverrideThreshold != nil {
		s.OverrideThreshold = *o.OverrideThreshold
	}
	return s
}

// overrideSource names the operator's overrides in errors.
const overrideSource = "operator override"

// ValidateFields checks each overridden value on its own (the combination is checked against the
// declared settings by Check).
func (o Overrides) ValidateFields() error {
	const in = " (" + overrideSource + ")"
	if o.ConcurrencyLimit != nil {
		if err := checkLimit(*o.ConcurrencyLimit, in); err != nil {
			return err
		}
	}
	if o.DeathMode != nil && *o.DeathMode != modeKeepAlive && *o.DeathMode != modeOverride {
		return invalid("DeathMode", "DeathMode%s is %d; want DeathModeKeepAlive or DeathModeOverride", in, *o.DeathMode)
	}
	for _, d := range []struct {
		field string
		value *time.Duration
	}{
		{"KeepAliveInterval", o.KeepAliveInterval},
		{"KeepAliveDeathThreshold", o.KeepAliveDeathThreshold},
		{"OverrideThreshold", o.OverrideThreshold},
	} {
		if d.value != nil {
			if err := checkRange(d.field, in, *d.value, bounds[d.field][0], bounds[d.field][1]); err != nil {
				return err
			}
		}
	}
	if o.KeepAliveInterval != nil && o.KeepAliveDeathThreshold != nil && *o.KeepAliveDeathThreshold < 2**o.KeepAliveInterval {
		return invalid("KeepAliveDeathThreshold", "KeepAliveDeathThreshold%s (%s) must be at least twice KeepAliveInterval (%s)", in, *o.KeepAliveDeathThreshold, *o.KeepAliveInterval)
	}
	return nil
}

// Liveness reports whether o overrides a setting of the liveness rules (death mode, interval,
// thresholds): those are the ones whose combination with the declared settings can be invalid.
func (o Overrides) Liveness() bool {
	return o.DeathMode != nil || o.KeepAliveInterval != nil || o.KeepAliveDeathThreshold != nil || o.OverrideThreshold != nil
}

// Check validates the settings in force, o over declared, naming where each value comes from:
// "operator override", or declaredAs ("declared by worker-1"). A host may declare settings that
// an override set earlier does not fit: a start then fails with this error, naming both.
func (o Overrides) Check(declared Settings, declaredAs string) error {
	declared.Retention = Retention{} // not overridden here, and checked with its layer
	return o.Apply(declared).validate(func(field string) string {
		if o.sets(field) {
			return overrideSource
		}
		return declaredAs
	})
}

// sets reports whether o overrides field.
func (o Overrides) sets(field string) bool {
	switch field {
	case "ConcurrencyLimit":
		return o.ConcurrencyLimit != nil
	case "DeathMode":
		return o.DeathMode != nil
	case "KeepAliveInterval":
		return o.KeepAliveInterval != nil
	case "KeepAliveDeathThreshold":
		return o.KeepAliveDeathThreshold != nil
	case "OverrideThreshold":
		return o.OverrideThreshold != nil
	}
	return false
}
