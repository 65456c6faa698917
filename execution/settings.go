package execution

import (
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/taskling-go/taskling/internal/codes"
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

// MaxNamedKeys bounds the keys named with a limit of their own, per task and per layer: they are
// kept in the task row, which every acquire rewrites.
const MaxNamedKeys = 1000

// checkKeyLimit checks a key's limit: 0 (none) or 1 to MaxConcurrencyLimit.
func checkKeyLimit(field string, limit int, in string) error {
	if limit < 0 || limit > MaxConcurrencyLimit {
		return invalid(field, "%s%s is %d; want 0 (no key limit) or 1 to %d", field, in, limit, MaxConcurrencyLimit)
	}
	return nil
}

// CheckNamedKeyLimit checks a named key's limit: 1 to MaxConcurrencyLimit; in says where it came
// from ("operator override").
func CheckNamedKeyLimit(field string, limit int, in string) error {
	if limit < 1 || limit > MaxConcurrencyLimit {
		return invalid(field, "%s (%s) is %d; want 1 to %d", field, in, limit, MaxConcurrencyLimit)
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
	// KeyLimit is every key's limit (the cost its live holders may hold together), 0 for none;
	// KeyLimits the limits of named keys, which win over it (docs/keys.md).
	KeyLimit  int
	KeyLimits map[string]int
	// Rate bounds the task's starts over time, KeyRate each key's, KeyRates named keys' (winning
	// over KeyRate); the zero Rate is none (docs/rates.md).
	Rate     Rate
	KeyRate  Rate
	KeyRates map[string]Rate
}

// KeepAlive reports whether holders are judged by their heartbeats (else by their start time).
func (s Settings) KeepAlive() bool { return s.DeathMode == codes.DeathKeepAlive }

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
	if err := checkKeyLimit("KeyLimit", s.KeyLimit, in("KeyLimit")); err != nil {
		return err
	}
	if len(s.KeyLimits) > MaxNamedKeys {
		return invalid("KeyLimits", "KeyLimits%s names %d keys; at most %d allowed", in("KeyLimits"), len(s.KeyLimits), MaxNamedKeys)
	}
	for k, l := range s.KeyLimits {
		if l < 1 || l > MaxConcurrencyLimit {
			return invalid("KeyLimits", "KeyLimits[%q]%s is %d; want 1 to %d", k, in("KeyLimits"), l, MaxConcurrencyLimit)
		}
	}
	if err := s.validateRates(in); err != nil {
		return err
	}
	if s.DeathMode != codes.DeathKeepAlive && s.DeathMode != codes.DeathOverride {
		return invalid("DeathMode", "DeathMode%s is %d; want DeathModeKeepAlive or DeathModeOverride", in("DeathMode"), s.DeathMode)
	}
	if s.Retention != (Retention{}) {
		if err := s.Retention.Validate(in("Retention")); err != nil {
			return err
		}
	}
	if s.DeathMode == codes.DeathOverride {
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

// validateRates checks the rates of s.
func (s Settings) validateRates(in func(string) string) error {
	if err := s.Rate.Validate("Rate", in("Rate")); err != nil {
		return err
	}
	if err := s.KeyRate.Validate("KeyRate", in("KeyRate")); err != nil {
		return err
	}
	if len(s.KeyRates) > MaxNamedKeys {
		return invalid("KeyRates", "KeyRates%s names %d keys; at most %d allowed", in("KeyRates"), len(s.KeyRates), MaxNamedKeys)
	}
	for k, r := range s.KeyRates {
		if err := r.Validate(fmt.Sprintf("KeyRates[%q]", k), in("KeyRates")); err != nil {
			return err
		}
	}
	return nil
}

// Threshold is the time after which a silent holder is judged dead in its death mode.
func (s Settings) Threshold() time.Duration {
	if s.DeathMode == codes.DeathOverride {
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
	// KeyLimit overrides every key's declared limit (0: no key limit); KeyLimits override named
	// keys' limits, and win over KeyLimit.
	KeyLimit  *int
	KeyLimits map[string]int
	// Rate and KeyRate override the declared ones (a zero Rate: none); KeyRates override named
	// keys' rates, and win over KeyRate.
	Rate      *Rate
	KeyRate   *Rate
	KeyRates  map[string]Rate
	UpdatedAt *time.Time
}

// IsZero reports whether no setting is overridden.
func (o Overrides) IsZero() bool {
	return o.ConcurrencyLimit == nil && o.Enabled == nil && o.DeathMode == nil &&
		o.KeepAliveInterval == nil && o.KeepAliveDeathThreshold == nil && o.OverrideThreshold == nil &&
		o.KeyLimit == nil && len(o.KeyLimits) == 0 && !o.Rated()
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
	if o.KeyLimit != nil {
		s.KeyLimit = *o.KeyLimit
	}
	if o.Rate != nil {
		s.Rate = *o.Rate
	}
	if o.KeyRate != nil {
		s.KeyRate = *o.KeyRate
	}
	return s
}

// Sources of a key's limit, as KeyLimitOf names them.
const (
	KeySourceOverride         = "operator override of the key"
	KeySourceKeyLimitOverride = "operator override of KeyLimit"
	KeySourceDeclaredKey      = "declared for the key"
	KeySourceDeclared         = "declared KeyLimit"
)

// KeyLimitOf is key's limit (0: none) with declared in force under o, and where it comes from:
// the operator's override for the key, else the operator's KeyLimit, else the limit declared for
// the key, else the declared KeyLimit.
func KeyLimitOf(key string, declared Settings, o Overrides) (int, string) {
	if l, ok := o.KeyLimits[key]; ok {
		return l, KeySourceOverride
	}
	if o.KeyLimit != nil {
		return *o.KeyLimit, KeySourceKeyLimitOverride
	}
	if l, ok := declared.KeyLimits[key]; ok {
		return l, KeySourceDeclaredKey
	}
	return declared.KeyLimit, KeySourceDeclared
}

// Equal reports whether s and o are the same settings, named keys included.
func (s Settings) Equal(o Settings) bool {
	return s.ConcurrencyLimit == o.ConcurrencyLimit && s.Enabled == o.Enabled && s.DeathMode == o.DeathMode &&
		s.KeepAliveInterval == o.KeepAliveInterval && s.KeepAliveDeathThreshold == o.KeepAliveDeathThreshold &&
		s.OverrideThreshold == o.OverrideThreshold && s.Retention == o.Retention && s.KeyLimit == o.KeyLimit &&
		maps.Equal(s.KeyLimits, o.KeyLimits) && s.Rate == o.Rate && s.KeyRate == o.KeyRate && maps.Equal(s.KeyRates, o.KeyRates)
}

// Keyed reports whether declared settings limit keys.
func (s Settings) Keyed() bool { return s.KeyLimit > 0 || len(s.KeyLimits) > 0 }

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
	if o.KeyLimit != nil {
		if err := checkKeyLimit("KeyLimit", *o.KeyLimit, in); err != nil {
			return err
		}
	}
	for _, r := range []struct {
		field string
		rate  *Rate
	}{{"Rate", o.Rate}, {"KeyRate", o.KeyRate}} {
		if r.rate != nil {
			if err := r.rate.Validate(r.field, in); err != nil {
				return err
			}
		}
	}
	for k, r := range o.KeyRates {
		if err := r.Validate(fmt.Sprintf("KeyRates[%q]", k), in); err != nil {
			return err
		}
	}
	if o.DeathMode != nil && *o.DeathMode != codes.DeathKeepAlive && *o.DeathMode != codes.DeathOverride {
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
	case "KeyLimit":
		return o.KeyLimit != nil
	case "Rate":
		return o.Rate != nil
	case "KeyRate":
		return o.KeyRate != nil
	}
	return false
}

// MinKeep is the shortest keep setting: history younger than a minute is never deleted.
const MinKeep = time.Minute

// Retention is how long a task's history is kept, by outcome.
type Retention struct {
	// Completed executions (and completed submissions).
	Completed time.Duration
	// Failed and dead executions (and dead or cancelled submissions).
	Failed time.Duration
	// Blocked (denied) starts.
	Blocked time.Duration
}

// Validate reports the first keep setting below MinKeep, naming it; in says where it came from.
func (r Retention) Validate(in string) error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"KeepCompleted", r.Completed}, {"KeepFailed", r.Failed}, {"KeepBlocked", r.Blocked}} {
		if err := checkMin(f.name, in, f.d, MinKeep); err != nil {
			return err
		}
	}
	return nil
}

// RetentionOverrides are an operator's keep settings; nil fields are not overridden.
type RetentionOverrides struct {
	Completed, Failed, Blocked *time.Duration
}

// IsZero reports whether nothing is overridden.
func (o RetentionOverrides) IsZero() bool {
	return o.Completed == nil && o.Failed == nil && o.Blocked == nil
}

// Apply returns r with every overridden field replaced.
func (o RetentionOverrides) Apply(r Retention) Retention {
	if o.Completed != nil {
		r.Completed = *o.Completed
	}
	if o.Failed != nil {
		r.Failed = *o.Failed
	}
	if o.Blocked != nil {
		r.Blocked = *o.Blocked
	}
	return r
}

// ValidateFields checks each overridden value.
func (o RetentionOverrides) ValidateFields() error {
	const in = " (operator override)"
	for _, f := range []struct {
		name string
		d    *time.Duration
	}{{"KeepCompleted", o.Completed}, {"KeepFailed", o.Failed}, {"KeepBlocked", o.Blocked}} {
		if f.d != nil {
			if err := checkMin(f.name, in, *f.d, MinKeep); err != nil {
				return err
			}
		}
	}
	return nil
}
