package taskling

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/taskling-go/taskling/execution"
	"github.com/taskling-go/taskling/internal/store/adminstore"
	"github.com/taskling-go/taskling/tasklingtype"
)

// Bounds of the settings (see the README's settings table).
const (
	// MaxConcurrencyLimit is the largest limit: every acquire rewrites the token list (about 50
	// bytes a slot) under the task row's lock.
	MaxConcurrencyLimit = execution.MaxConcurrencyLimit
	// MinKeepAliveInterval is the shortest heartbeat period, MaxKeepAliveInterval the longest
	// (an hour).
	MinKeepAliveInterval = execution.MinKeepAliveInterval
	MaxKeepAliveInterval = execution.MaxKeepAliveInterval
	// MinThreshold is the shortest KeepAliveDeathThreshold or OverrideThreshold, MaxThreshold the
	// longest (a day).
	MinThreshold = execution.MinThreshold
	MaxThreshold = execution.MaxThreshold
	// MinKeep is the shortest keep setting (KeepCompleted, KeepFailed, KeepBlocked).
	MinKeep = execution.MinKeep
	// KeepForever as a keep setting means "never delete" (it is about 292 years).
	KeepForever = adminstore.KeepForever
)

// Library defaults (see the README's settings table).
const (
	DefaultConcurrencyLimit        = 1
	DefaultKeepAliveInterval       = 5 * time.Second
	DefaultKeepAliveDeathThreshold = 20 * time.Second
	// DefaultSafetyMarginPercent of the death threshold is the local safety margin: an execution
	// cancels its own context that long before any other host may judge it dead.
	DefaultSafetyMarginPercent = 25
	// History is kept 14 days after a completion, 40 after a failure or death, 1 after a denial.
	DefaultKeepCompleted = 14 * 24 * time.Hour
	DefaultKeepFailed    = 40 * 24 * time.Hour
	DefaultKeepBlocked   = 24 * time.Hour
)

// TaskSettings configure a task. A zero field is not set at this layer and inherits from the
// layer below: library defaults ← Config.Defaults ← Config.Settings ← operator overrides.
type TaskSettings struct {
	// ConcurrencyLimit: -1 unlimited, 1 to MaxConcurrencyLimit slots fleet-wide, 0 = not set
	// here. Default 1.
	ConcurrencyLimit int
	// Disabled: starts return ErrTaskDisabled and no execution is recorded. True at any layer
	// disables the task, unless an operator override enables it.
	Disabled bool
	// DeathMode: DeathModeKeepAlive (default) or DeathModeOverride.
	DeathMode DeathMode
	// KeepAliveInterval between heartbeats. Default 5s; MinKeepAliveInterval to
	// MaxKeepAliveInterval.
	KeepAliveInterval time.Duration
	// KeepAliveDeathThreshold: a holder silent this long is dead. Default 20s; at least twice the
	// interval, so one late heartbeat never kills a holder, and MinThreshold to MaxThreshold.
	KeepAliveDeathThreshold time.Duration
	// OverrideThreshold: required in Override mode (MinThreshold to MaxThreshold); a holder is
	// dead this long after its start.
	OverrideThreshold time.Duration
	// LeaseSafetyMargin: how long before the death threshold (measured on the local monotonic
	// clock from its last successful heartbeat) an execution cancels its own context. It absorbs
	// clock-rate drift and scheduling delay. Default 25% of the threshold; local to this process.
	// It must be less than the threshold minus the interval (Override mode: less than the
	// threshold), or every execution would cancel itself before its first heartbeat.
	LeaseSafetyMargin time.Duration
	// KeepCompleted: how long after it ended a completed execution (with its events, blocks and
	// items, and a completed submission) is kept before cleanup deletes it. Default 14 days;
	// KeepForever keeps it forever; at least MinKeep. See the README's "Retention".
	KeepCompleted time.Duration
	// KeepFailed: the same for failed and dead executions (and dead or cancelled submissions).
	// Default 40 days.
	KeepFailed time.Duration
	// KeepBlocked: how long a denied start (blocked execution) is kept. Default 1 day.
	KeepBlocked time.Duration
	// KeyLimit: at most this much cost at once per key (StartOptions.Key), 0 = no key limit (or
	// not set here). The empty key is a key like any other. 1 to MaxConcurrencyLimit. See
	// docs/keys.md.
	KeyLimit int
	// Keys are the settings of named keys: a key's Limit wins over KeyLimit. At most
	// MaxNamedKeys keys; a layer's keys are added to those of the layers below (a key named in
	// both takes this layer's settings).
	Keys map[string]KeySettings
	// Rate bounds the task's starts over time: at most Count units per Per, Burst at once, a
	// start of cost c taking c units; the zero Rate is none (or not set here). Decided on the
	// database clock; see docs/rates.md.
	Rate Rate
	// KeyRate bounds each key's starts over time, as Rate the task's (the empty key is a key like
	// any other); a named key's Rate wins over it.
	KeyRate Rate
}

// KeySettings are the settings of one named key.
type KeySettings struct {
	// Limit: at most this much cost at once under the key, 1 to MaxConcurrencyLimit (0: the
	// task's KeyLimit, for a key named for its Rate only).
	Limit int
	// Rate: the key's rate, winning over KeyRate (zero: KeyRate's).
	Rate Rate
}

// Rate is at most Count units per Per, at most Burst at once (0 means 1): "100/1m",
// "500/1s,burst=50" as ParseRate reads it and String writes it. A start of cost c takes c units,
// so Burst must be at least the largest cost the rate admits. The zero Rate is none.
type Rate = tasklingtype.Rate

// ParseRate reads a rate: COUNT/PER with PER a Go duration ("100/1m", "30/1s"; a bare unit is
// one of it, "100/m"), optionally ",burst=B". "" and "none" are the zero Rate (none).
func ParseRate(s string) (Rate, error) {
	r, err := execution.ParseRate(s)
	if err != nil {
		return Rate(r), fmt.Errorf("%w: %w", ErrInvalidSettings, err)
	}
	return Rate(r), nil
}

// Bounds of a rate.
const (
	MaxRateCount = execution.MaxRateCount
	MinRatePer   = execution.MinRatePer
	MaxRatePer   = execution.MaxRatePer
)

// MaxNamedKeys bounds the keys named in a task's settings (TaskSettings.Keys), and those an
// operator overrides: they are kept in the task row, which every acquire rewrites.
const MaxNamedKeys = execution.MaxNamedKeys

// over returns s with every field set in top replacing it.
func (s TaskSettings) over(top TaskSettings) TaskSettings {
	if top.ConcurrencyLimit != 0 {
		s.ConcurrencyLimit = top.ConcurrencyLimit
	}
	s.Disabled = s.Disabled || top.Disabled
	if top.DeathMode != deathModeUnset {
		s.DeathMode = top.DeathMode
	}
	if top.KeepAliveInterval != 0 {
		s.KeepAliveInterval = top.KeepAliveInterval
	}
	if top.KeepAliveDeathThreshold != 0 {
		s.KeepAliveDeathThreshold = top.KeepAliveDeathThreshold
	}
	if top.OverrideThreshold != 0 {
		s.OverrideThreshold = top.OverrideThreshold
	}
	if top.LeaseSafetyMargin != 0 {
		s.LeaseSafetyMargin = top.LeaseSafetyMargin
	}
	if top.KeepCompleted != 0 {
		s.KeepCompleted = top.KeepCompleted
	}
	if top.KeepFailed != 0 {
		s.KeepFailed = top.KeepFailed
	}
	if top.KeepBlocked != 0 {
		s.KeepBlocked = top.KeepBlocked
	}
	if top.KeyLimit != 0 {
		s.KeyLimit = top.KeyLimit
	}
	if !top.Rate.IsZero() {
		s.Rate = top.Rate
	}
	if !top.KeyRate.IsZero() {
		s.KeyRate = top.KeyRate
	}
	if len(top.Keys) > 0 {
		keys := maps.Clone(s.Keys)
		if keys == nil {
			keys = map[string]KeySettings{}
		}
		maps.Copy(keys, top.Keys)
		s.Keys = keys
	}
	return s
}

func librarySettings() TaskSettings {
	return TaskSettings{
		ConcurrencyLimit:        DefaultConcurrencyLimit,
		DeathMode:               DeathModeKeepAlive,
		KeepAliveInterval:       DefaultKeepAliveInterval,
		KeepAliveDeathThreshold: DefaultKeepAliveDeathThreshold,
		KeepCompleted:           DefaultKeepCompleted,
		KeepFailed:              DefaultKeepFailed,
		KeepBlocked:             DefaultKeepBlocked,
	}
}

// Validate checks s as one layer of settings (zero fields inherit) and as it would be in force
// over the library defaults, naming the field at fault. Starts run the same checks on every
// layer; a SettingsSource can use Validate to refuse bad settings before they are asked for.
func (s TaskSettings) Validate() error {
	if err := s.validateLayer("settings"); err != nil {
		return err
	}
	_, err := librarySettings().over(s).toStore("settings")
	return err
}

// validateLayer checks the values set at one layer, before merging, naming the field.
func (s TaskSettings) validateLayer(layer string) error {
	switch {
	case s.ConcurrencyLimit < -1 || s.ConcurrencyLimit > MaxConcurrencyLimit:
		return fmt.Errorf("%w: ConcurrencyLimit (%s) is %d; want -1 (unlimited), 0 (inherit) or 1 to %d", ErrInvalidSettings, layer, s.ConcurrencyLimit, MaxConcurrencyLimit)
	case s.DeathMode < deathModeUnset || s.DeathMode > DeathModeOverride:
		return fmt.Errorf("%w: DeathMode (%s) is %d; want DeathModeKeepAlive or DeathModeOverride", ErrInvalidSettings, layer, int(s.DeathMode))
	case s.KeepAliveInterval < 0:
		return fmt.Errorf("%w: KeepAliveInterval (%s) is negative (%s)", ErrInvalidSettings, layer, s.KeepAliveInterval)
	case s.KeepAliveDeathThreshold < 0:
		return fmt.Errorf("%w: KeepAliveDeathThreshold (%s) is negative (%s)", ErrInvalidSettings, layer, s.KeepAliveDeathThreshold)
	case s.OverrideThreshold < 0:
		return fmt.Errorf("%w: OverrideThreshold (%s) is negative (%s)", ErrInvalidSettings, layer, s.OverrideThreshold)
	case s.LeaseSafetyMargin < 0:
		return fmt.Errorf("%w: LeaseSafetyMargin (%s) is negative (%s)", ErrInvalidSettings, layer, s.LeaseSafetyMargin)
	case s.KeepCompleted != 0 && s.KeepCompleted < MinKeep:
		return fmt.Errorf("%w: KeepCompleted (%s) is %s; want at least %s, or KeepForever", ErrInvalidSettings, layer, s.KeepCompleted, MinKeep)
	case s.KeepFailed != 0 && s.KeepFailed < MinKeep:
		return fmt.Errorf("%w: KeepFailed (%s) is %s; want at least %s, or KeepForever", ErrInvalidSettings, layer, s.KeepFailed, MinKeep)
	case s.KeepBlocked != 0 && s.KeepBlocked < MinKeep:
		return fmt.Errorf("%w: KeepBlocked (%s) is %s; want at least %s, or KeepForever", ErrInvalidSettings, layer, s.KeepBlocked, MinKeep)
	case s.KeyLimit < 0 || s.KeyLimit > MaxConcurrencyLimit:
		return fmt.Errorf("%w: KeyLimit (%s) is %d; want 0 (none) or 1 to %d", ErrInvalidSettings, layer, s.KeyLimit, MaxConcurrencyLimit)
	case len(s.Keys) > MaxNamedKeys:
		return fmt.Errorf("%w: Keys (%s) names %d keys; at most %d allowed", ErrInvalidSettings, layer, len(s.Keys), MaxNamedKeys)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Keys)) {
		if err := validateKey(fmt.Sprintf("Keys[%q]", k), k); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidSettings, err)
		}
		ks := s.Keys[k]
		if l := ks.Limit; l < 0 || l > MaxConcurrencyLimit || l == 0 && ks.Rate.IsZero() {
			return fmt.Errorf("%w: Keys[%q].Limit (%s) is %d; want 1 to %d (0 only beside a Rate)", ErrInvalidSettings, k, layer, l, MaxConcurrencyLimit)
		}
		if err := execution.Rate(ks.Rate).Validate(fmt.Sprintf("Keys[%q].Rate", k), " ("+layer+")"); err != nil {
			return err
		}
	}
	if err := execution.Rate(s.Rate).Validate("Rate", " ("+layer+")"); err != nil {
		return err
	}
	if err := execution.Rate(s.KeyRate).Validate("KeyRate", " ("+layer+")"); err != nil {
		return err
	}
	for _, d := range []struct {
		field    string
		v        time.Duration
		min, max time.Duration
	}{
		{"KeepAliveInterval", s.KeepAliveInterval, MinKeepAliveInterval, MaxKeepAliveInterval},
		{"KeepAliveDeathThreshold", s.KeepAliveDeathThreshold, MinThreshold, MaxThreshold},
		{"OverrideThreshold", s.OverrideThreshold, MinThreshold, MaxThreshold},
	} {
		switch {
		case d.v > 0 && d.v < d.min:
			return fmt.Errorf("%w: %s (%s) is %s; want at least %s", ErrInvalidSettings, d.field, layer, d.v, d.min)
		case d.v > d.max:
			return fmt.Errorf("%w: %s (%s) is %s; want at most %s", ErrInvalidSettings, d.field, layer, d.v, d.max)
		}
	}
	return nil
}

// toStore converts merged settings to the store's complete form and validates the combination.
func (s TaskSettings) toStore(layer string) (execution.Settings, error) {
	es := execution.Settings{
		ConcurrencyLimit:        s.ConcurrencyLimit,
		Enabled:                 !s.Disabled,
		DeathMode:               int16(s.DeathMode),
		KeepAliveInterval:       s.KeepAliveInterval,
		KeepAliveDeathThreshold: s.KeepAliveDeathThreshold,
		OverrideThreshold:       s.OverrideThreshold,
		Retention:               execution.Retention{Completed: s.KeepCompleted, Failed: s.KeepFailed, Blocked: s.KeepBlocked},
		KeyLimit:                s.KeyLimit,
		Rate:                    execution.Rate(s.Rate),
		KeyRate:                 execution.Rate(s.KeyRate),
	}
	for k, ks := range s.Keys {
		if ks.Limit > 0 {
			if es.KeyLimits == nil {
				es.KeyLimits = map[string]int{}
			}
			es.KeyLimits[k] = ks.Limit
		}
		if !ks.Rate.IsZero() {
			if es.KeyRates == nil {
				es.KeyRates = map[string]execution.Rate{}
			}
			es.KeyRates[k] = execution.Rate(ks.Rate)
		}
	}
	if err := es.Validate(layer); err != nil {
		return es, err
	}
	if m := s.LeaseSafetyMargin; m > 0 {
		if es.KeepAlive() && m >= es.KeepAliveDeathThreshold-es.KeepAliveInterval {
			return es, fmt.Errorf("%w: LeaseSafetyMargin (%s) is %s; want less than KeepAliveDeathThreshold − KeepAliveInterval (%s), or every execution would cancel itself before its first heartbeat",
				ErrInvalidSettings, layer, m, es.KeepAliveDeathThreshold-es.KeepAliveInterval)
		}
		if !es.KeepAlive() && m >= es.OverrideThreshold {
			return es, fmt.Errorf("%w: LeaseSafetyMargin (%s) is %s; want less than OverrideThreshold (%s)", ErrInvalidSettings, layer, m, es.OverrideThreshold)
		}
	}
	return es, nil
}

// safetyMargin is the local margin for the effective settings. A declared margin that does not
// fit the settings in force (an operator override shortened the threshold) gives way to the
// default percentage, so that the override cannot make every execution cancel itself at once.
func safetyMargin(s TaskSettings, effective execution.Settings) time.Duration {
	threshold := effective.Threshold()
	room := threshold
	if effective.KeepAlive() {
		room -= effective.KeepAliveInterval
	}
	if m := s.LeaseSafetyMargin; m > 0 && m < room {
		return m
	}
	return threshold * DefaultSafetyMarginPercent / 100
}

// SettingsSource supplies per-task settings (from code, a config file, a service…). It is asked
// on every start, so a source that reloads its file applies a change at the next start. Return a
// zero TaskSettings for a task it does not know.
type SettingsSource interface {
	TaskSettings(ctx context.Context, app, task string) (TaskSettings, error)
}

// SettingsFunc adapts a function to SettingsSource.
type SettingsFunc func(ctx context.Context, app, task string) (TaskSettings, error)

// TaskSettings implements SettingsSource.
func (f SettingsFunc) TaskSettings(ctx context.Context, app, task string) (TaskSettings, error) {
	return f(ctx, app, task)
}

// StaticSettings is a SettingsSource from a map keyed "app/task".
type StaticSettings map[string]TaskSettings

// TaskSettings implements SettingsSource.
func (m StaticSettings) TaskSettings(_ context.Context, app, task string) (TaskSettings, error) {
	return m[app+"/"+task], nil
}

// retentionOverrides are u's keep settings as the store takes them.
func retentionOverrides(u SettingsUpdate) execution.RetentionOverrides {
	return execution.RetentionOverrides{Completed: u.KeepCompleted, Failed: u.KeepFailed, Blocked: u.KeepBlocked}
}

// overrides are u's other settings as the store takes them.
func overrides(u SettingsUpdate) execution.Overrides {
	o := execution.Overrides{
		KeyLimit:                u.KeyLimit,
		ConcurrencyLimit:        u.ConcurrencyLimit,
		Enabled:                 u.Enabled,
		KeepAliveInterval:       u.KeepAliveInterval,
		KeepAliveDeathThreshold: u.KeepAliveDeathThreshold,
		OverrideThreshold:       u.OverrideThreshold,
	}
	if u.DeathMode != nil {
		m := int16(*u.DeathMode)
		o.DeathMode = &m
	}
	o.Rate, o.KeyRate = storeRate(u.Rate), storeRate(u.KeyRate)
	return o
}

// storeRate is r as the store takes it (nil stays nil).
func storeRate(r *Rate) *execution.Rate {
	if r == nil {
		return nil
	}
	v := execution.Rate(*r)
	return &v
}
