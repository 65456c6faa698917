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

// Bounds of the settings (taskling re-exports them).
const (
	// MaxConcurrencyLimit bounds a limit: the token list (about 50 bytes a slot) is rewritten by
	// every acquire under the task row's lock.
	MaxConcurrencyLimit = 10000
	// MinKeepAliveInterval bounds the heartbeat rate from above.
	MinKeepAliveInterval = 50 * time.Millisecond
	// MinThreshold is the shortest KeepAliveDeathThreshold or OverrideThreshold.
	MinThreshold = 250 * time.Millisecond
)

// checkLimit checks a concurrency limit; in names the layer it came from.
func checkLimit(limit int, in string) error {
	if limit != -1 && (limit < 1 || limit > MaxConcurrencyLimit) {
		return fmt.Errorf("%w: ConcurrencyLimit%s is %d; want -1 (unlimited) or 1 to %d", ErrInvalidSettings, in, limit, MaxConcurrencyLimit)
	}
	return nil
}

// checkMin checks that a duration setting is at least min.
func checkMin(field, in string, d, min time.Duration) error {
	if d < min {
		return fmt.Errorf("%w: %s%s is %s; want at least %s", ErrInvalidSettings, field, in, d, min)
	}
	return nil
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
	in := ""
	if source != "" {
		in = " (" + source + ")"
	}
	if err := checkLimit(s.ConcurrencyLimit, in); err != nil {
		return err
	}
	if s.DeathMode != modeKeepAlive && s.DeathMode != modeOverride {
		return fmt.Errorf("%w: DeathMode%s is %d; want DeathModeKeepAlive or DeathModeOverride", ErrInvalidSettings, in, s.DeathMode)
	}
	if s.Retention != (Retention{}) {
		if err := s.Retention.Validate(in); err != nil {
			return err
		}
	}
	if s.DeathMode == modeOverride {
		if s.OverrideThreshold <= 0 {
			return fmt.Errorf("%w: OverrideThreshold%s is %s; Override mode needs a threshold above zero", ErrInvalidSettings, in, s.OverrideThreshold)
		}
		return checkMin("OverrideThreshold", in, s.OverrideThreshold, MinThreshold)
	}
	if err := checkMin("KeepAliveInterval", in, s.KeepAliveInterval, MinKeepAliveInterval); err != nil {
		return err
	}
	if err := checkMin("KeepAliveDeathThreshold", in, s.KeepAliveDeathThreshold, MinThreshold); err != nil {
		return err
	}
	if s.KeepAliveDeathThreshold < 2*s.KeepAliveInterval {
		return fmt.Errorf("%w: KeepAliveDeathThreshold%s (%s) must be at least twice KeepAliveInterval (%s)", ErrInvalidSettings, in, s.KeepAliveDeathThreshold, s.KeepAliveInterval)
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

// ValidateFields checks each overridden value on its own (the combination is checked against a
// requester's declared settings at acquire time).
func (o Overrides) ValidateFields() error {
	const in = " (operator override)"
	if o.ConcurrencyLimit != nil {
		if err := checkLimit(*o.ConcurrencyLimit, in); err != nil {
			return err
		}
	}
	if o.DeathMode != nil && *o.DeathMode != modeKeepAlive && *o.DeathMode != modeOverride {
		return fmt.Errorf("%w: DeathMode%s is %d; want DeathModeKeepAlive or DeathModeOverride", ErrInvalidSettings, in, *o.DeathMode)
	}
	for _, d := range []struct {
		field string
		value *time.Duration
		min   time.Duration
	}{
		{"KeepAliveInterval", o.KeepAliveInterval, MinKeepAliveInterval},
		{"KeepAliveDeathThreshold", o.KeepAliveDeathThreshold, MinThreshold},
		{"OverrideThreshold", o.OverrideThreshold, MinThreshold},
	} {
		if d.value != nil {
			if err := checkMin(d.field, in, *d.value, d.min); err != nil {
				return err
			}
		}
	}
	if o.KeepAliveInterval != nil && o.KeepAliveDeathThreshold != nil && *o.KeepAliveDeathThreshold < 2**o.KeepAliveInterval {
		return fmt.Errorf("%w: KeepAliveDeathThreshold%s (%s) must be at least twice KeepAliveInterval (%s)", ErrInvalidSettings, in, *o.KeepAliveDeathThreshold, *o.KeepAliveInterval)
	}
	return nil
}
