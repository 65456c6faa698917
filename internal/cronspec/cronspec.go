// Package cronspec turns a cron spec and an IANA time zone into the instants at which a schedule
// fires. It uses github.com/netresearch/go-cron only to parse; the walk through time is its own,
// so that daylight-saving transitions follow one documented rule (see Schedule.Next).
//
// Specs: 5 fields (minute hour day-of-month month day-of-week), or 6 with a leading seconds
// field; descriptors (@yearly, @monthly, @weekly, @daily, @midnight, @hourly); and @every
// <duration> (at least 1s, whole seconds). Day-of-month and day-of-week combine as in crontab:
// when both are restricted, a day matching either fires.
package cronspec

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // every host uses the same zone data, whatever its OS ships

	cron "github.com/netresearch/go-cron"
)

// ErrInvalidSpec is wrapped by every parse error.
var ErrInvalidSpec = errors.New("invalid cron spec")

// ErrUnknownZone is wrapped when the time zone is not a known IANA name.
var ErrUnknownZone = errors.New("unknown time zone")

// MaxSpecLength is the longest spec accepted, in bytes.
const MaxSpecLength = 200

// Schedule is a parsed spec in a zone. It is immutable and safe for concurrent use.
type Schedule struct {
	spec  string
	loc   *time.Location
	civil *cron.SpecSchedule // fields matched against wall-clock time (evaluated in UTC)
	every time.Duration      // @every: instants are the multiples of every since the Unix epoch
	// fixedHour: the spec names specific hours, so a wall-clock time repeated by a fall-back
	// transition fires once (at its first occurrence). A spec that fires every hour fires in both.
	fixedHour bool
}

var parser = cron.MustNewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month |
	cron.Dow | cron.Descriptor | cron.DowOrDom)

var fieldNames = [2][]string{
	{"minute", "hour", "day-of-month", "month", "day-of-week"},
	{"second", "minute", "hour", "day-of-month", "month", "day-of-week"},
}

// Parse parses spec in the IANA zone ("" means UTC). Errors name the spec, and the field or zone
// at fault.
func Parse(spec, zone string) (*Schedule, error) {
	loc, err := LoadZone(zone)
	if err != nil {
		return nil, err
	}
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "":
		return nil, fmt.Errorf("%w: spec is empty", ErrInvalidSpec)
	case len(spec) > MaxSpecLength:
		return nil, fmt.Errorf("%w: spec is %d bytes; at most %d allowed", ErrInvalidSpec, len(spec), MaxSpecLength)
	case strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ="):
		return nil, fmt.Errorf("%w %q: give the time zone as an option, not in the spec", ErrInvalidSpec, spec)
	}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		// The parser truncates @every to whole seconds silently ("1500ms" would run every 1s).
		if every, err := time.ParseDuration(strings.TrimSpace(d)); err == nil && (every < time.Second || every%time.Second != 0) {
			return nil, fmt.Errorf("%w %q: @every takes whole seconds of at least 1s (like @every 2s or @every 90s), not %s", ErrInvalidSpec, spec, every)
		}
	}
	parsed, err := parser.Parse("TZ=UTC " + spec)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %s", ErrInvalidSpec, spec, describe(spec, err))
	}
	s := &Schedule{spec: spec, loc: loc}
	switch p := parsed.(type) {
	case cron.ConstantDelaySchedule:
		s.every = p.Delay
	case *cron.SpecSchedule:
		c := *p
		c.Location = time.UTC
		s.civil = &c
		const allHours = 1<<24 - 1
		s.fixedHour = c.Hour&allHours != allHours
	default:
		return nil, fmt.Errorf("%w %q: unsupported schedule type %T", ErrInvalidSpec, spec, parsed)
	}
	return s, nil
}

// LoadZone loads an IANA zone from the embedded database; "" is UTC. "Local" is refused: every
// host must compute the same instants.
func LoadZone(zone string) (*time.Location, error) {
	if zone == "" || zone == "UTC" {
		return time.UTC, nil
	}
	if zone == "Local" {
		return nil, fmt.Errorf("%w %q: name an IANA zone (the host's local zone differs between hosts)", ErrUnknownZone, zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrUnknownZone, zone, err)
	}
	return loc, nil
}

// describe names the field at fault by parsing each field alone.
func describe(spec string, err error) string {
	fields := strings.Fields(spec)
	if strings.HasPrefix(spec, "@") || (len(fields) != 5 && len(fields) != 6) {
		return err.Error()
	}
	names := fieldNames[len(fields)-5]
	for i, f := range fields {
		probe := make([]string, len(fields))
		for j := range probe {
			probe[j] = "*"
		}
		probe[i] = f
		if _, perr := parser.Parse("TZ=UTC " + strings.Join(probe, " ")); perr != nil {
			return fmt.Sprintf("%s field %q: %v", names[i], f, perr)
		}
	}
	return err.Error()
}

// Spec is the spec as parsed (trimmed).
func (s *Schedule) Spec() string { return s.spec }

// Location is the schedule's zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// searchLimit bounds the search for a next instant (a spec such as "0 0 30 2 *" never fires).
const searchLimit = 6 * 366 * 24 * time.Hour

// Next returns the first instant of the schedule strictly after t, or the zero time if there is
// none within about five years. Instants are whole seconds.
//
// Wall-clock specs are matched against the time in the schedule's zone, with two rules for
// daylight-saving transitions:
//   - a wall-clock time that does not exist (spring-forward gap) fires at the first moment after
//     the gap: "30 2 * * *" fires at 03:00 on the day New York skips 02:00–03:00. Several
//     skipped times fire once.
//   - a wall-clock time that occurs twice (fall-back repeat) fires once, at its first
//     occurrence, when the spec names specific hours ("30 1 * * *"); a spec that fires every hour
//     ("*/15 * * * *", "@hourly") fires in both occurrences, keeping its real-time rhythm.
//
// @every specs ignore the zone: they fire at the multiples of their interval since the Unix
// epoch, so every host computes the same instants whenever it started.
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		d := int64(s.every)
		n := t.UnixNano()
		q := n / d
		if n < 0 && n%d != 0 {
			q--
		}
		return time.Unix(0, (q+1)*d).UTC()
	}
	limit := t.Add(searchLimit)
	from := t
	for {
		start, end := from.In(s.loc).ZoneBounds()
		next, found, never := s.nextInPeriod(t, from, start, end)
		switch {
		case found:
			return next
		case never, end.IsZero(), end.After(limit):
			return time.Time{}
		}
		from = end
	}
}

// nextInPeriod looks for the first instant after t within the zone period [start, end) that
// contains from (a zero start or end is unbounded). never reports that the spec has no
// wall-clock time left within the parser's search horizon.
func (s *Schedule) nextInPeriod(t, from, start, end time.Time) (next time.Time, found, never bool) {
	_, off := from.In(s.loc).Zone()
	offset := time.Duration(off) * time.Second
	lower := t
	if !start.IsZero() {
		_, po := start.Add(-time.Nanosecond).In(s.loc).Zone()
		prevOffset := time.Duration(po) * time.Second
		// A spring-forward gap just before this period: its skipped wall-clock times fire at
		// the first moment after it.
		if prevOffset < offset && start.After(t) {
			gapFrom, gapTo := civil(start, prevOffset), civil(start, offset)
			if c := s.civil.Next(gapFrom.Add(-time.Second)); !c.IsZero() && c.Before(gapTo) {
				return start, true, false
			}
		}
		if lower.Before(start) {
			lower = start.Add(-time.Nanosecond)
		}
		// A fall-back repeat at the start of this period: for a fixed-hour spec its wall-clock
		// times already fired in the previous period.
		if prevOffset > offset && s.fixedHour {
			if repeatEnd := start.Add(prevOffset - offset); lower.Before(repeatEnd) {
				lower = repeatEnd.Add(-time.Nanosecond)
			}
		}
	}
	c := s.civil.Next(civil(lower, offset))
	if c.IsZero() {
		return time.Time{}, false, true
	}
	instant := c.Add(-offset)
	if !end.IsZero() && !instant.Before(end) {
		return time.Time{}, false, false
	}
	return instant, true, false
}

// civil is the wall-clock time of instant t at offset, represented as a UTC time.
func civil(t time.Time, offset time.Duration) time.Time {
	return t.Add(offset).UTC()
}
