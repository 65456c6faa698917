package cronspec

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// walk returns the first n instants after from, formatted in the schedule's zone.
func walk(t *testing.T, spec, zone, from string, n int) []string {
	t.Helper()
	s, err := Parse(spec, zone)
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339, from)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for range n {
		at = s.Next(at)
		if at.IsZero() {
			out = append(out, "none")
			break
		}
		out = append(out, at.In(s.Location()).Format(time.RFC3339))
	}
	return out
}

// TestDSTGolden pins the daylight-saving rules: an instant in a spring-forward gap fires at the
// first moment after the gap; a repeated wall-clock time fires once for a fixed-hour spec and
// twice for an every-hour spec.
func TestDSTGolden(t *testing.T) {
	cases := []struct {
		name, spec, zone, from string
		want                   []string
	}{
		{"new york spring gap: 02:30 runs at 03:00 once", "30 2 * * *", "America/New_York", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"new york spring gap: several skipped times fire once", "0,15,30 2 * * *", "America/New_York", "2026-03-08T00:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		{"new york spring gap: every-15-minutes spec keeps its rhythm", "*/15 * * * *", "America/New_York", "2026-03-08T01:30:00-05:00",
			[]string{"2026-03-08T01:45:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:15:00-04:00"}},
		{"new york fall repeat: 01:30 runs once", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00-04:00",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"new york fall repeat: every-30-minutes spec runs in both occurrences", "*/30 * * * *", "America/New_York", "2026-11-01T00:45:00-04:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"new york fall repeat: @hourly runs in both occurrences", "@hourly", "America/New_York", "2026-11-01T00:30:00-04:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"london spring gap: 01:30 runs at 02:00 BST", "30 1 * * *", "Europe/London", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"}},
		{"london fall repeat: 01:30 runs once", "30 1 * * *", "Europe/London", "2026-10-24T12:00:00+01:00",
			[]string{"2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00Z"}},
		{"lord howe spring: 02:15 in the 30-minute gap runs at 02:30", "15 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00:00+10:30",
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
		{"lord howe spring: 02:30 exists", "30 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00:00+10:30",
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:30:00+11:00"}},
		{"lord howe fall: 01:45 repeated half hour runs once", "45 1 * * *", "Australia/Lord_Howe", "2026-04-04T12:00:00+11:00",
			[]string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
		{"lord howe fall: every-15-minutes spec runs in both half hours", "*/15 * * * *", "Australia/Lord_Howe", "2026-04-05T01:20:00+11:00",
			[]string{"2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30", "2026-04-05T02:00:00+10:30"}},
		{"sao paulo 2018: midnight gap runs at 01:00", "0 0 * * *", "America/Sao_Paulo", "2018-11-03T12:00:00-03:00",
			[]string{"2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00"}},
		{"sao paulo 2018: @daily too", "@daily", "America/Sao_Paulo", "2018-11-03T12:00:00-03:00",
			[]string{"2018-11-04T01:00:00-02:00", "2018-11-05T00:00:00-02:00"}},
		{"sao paulo 2019: fall-back midnight repeat runs once", "0 23 * * *", "America/Sao_Paulo", "2019-02-16T12:00:00-02:00",
			[]string{"2019-02-16T23:00:00-02:00", "2019-02-17T23:00:00-03:00"}},
		{"seconds field", "*/20 * * * * *", "UTC", "2026-01-01T00:00:05Z",
			[]string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
		{"@every is anchored to the epoch, not to the zone", "@every 90s", "America/New_York", "2026-03-08T01:59:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-08T03:01:30-04:00"}},
		{"crontab day rule: day-of-month OR day-of-week", "0 0 1 * MON", "UTC", "2026-06-01T00:00:00Z",
			[]string{"2026-06-08T00:00:00Z", "2026-06-15T00:00:00Z", "2026-06-22T00:00:00Z", "2026-06-29T00:00:00Z", "2026-07-01T00:00:00Z"}},
		{"never", "0 0 30 2 *", "UTC", "2026-01-01T00:00:00Z", []string{"none"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := walk(t, c.spec, c.zone, c.from, len(c.want))
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("%s in %s from %s:\n got %v\nwant %v", c.spec, c.zone, c.from, got, c.want)
			}
		})
	}
}

// TestNextIsStrictlyIncreasingThroughTransitions walks dense specs across a year of transitions
// in several zones: never backwards, never a duplicate, always whole seconds.
func TestNextIsStrictlyIncreasingThroughTransitions(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Sao_Paulo", "UTC"} {
		for _, spec := range []string{"*/7 * * * *", "30 1,2 * * *", "0 0 * * *", "@hourly"} {
			s, err := Parse(spec, zone)
			if err != nil {
				t.Fatal(err)
			}
			at := time.Date(2018, 1, 1, 0, 0, 0, 0, time.UTC)
			end := at.AddDate(1, 0, 0)
			for at.Before(end) {
				next := s.Next(at)
				if !next.After(at) || next.Nanosecond() != 0 {
					t.Fatalf("%s in %s: Next(%s) = %s", spec, zone, at, next)
				}
				at = next
			}
		}
	}
}

func TestParseErrorsNameTheSpecAndField(t *testing.T) {
	cases := []struct{ spec, zone, want string }{
		{"61 * * * *", "", `minute field "61"`},
		{"* 25 * * *", "", `hour field "25"`},
		{"0 0 * * * *", "", ``},
		{"99 0 0 * * *", "", `second field "99"`},
		{"* * * * FUNDAY", "", `day-of-week field "FUNDAY"`},
		{"* * * *", "", `"* * * *"`},
		{"@fortnightly", "", `"@fortnightly"`},
		{"@every 10ms", "", `"@every 10ms"`},
		{"", "", "empty"},
		{"TZ=UTC * * * * *", "", "time zone as an option"},
		{"* * * * *", "Mars/Olympus_Mons", `"Mars/Olympus_Mons"`},
		{"* * * * *", "Local", `"Local"`},
	}
	for _, c := range cases {
		_, err := Parse(c.spec, c.zone)
		if c.want == "" {
			if err != nil {
				t.Errorf("Parse(%q): %v", c.spec, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q, %q) = %v; want an error containing %s", c.spec, c.zone, err, c.want)
			continue
		}
		if !errors.Is(err, ErrInvalidSpec) && !errors.Is(err, ErrUnknownZone) {
			t.Errorf("Parse(%q, %q): %v wraps neither sentinel", c.spec, c.zone, err)
		}
	}
}

// TestEveryWithFractionalSecondsIsRefused is issue 15 item 2: the parser truncated "@every
// 1500ms" to 1s, and it ran every second while the registration recorded 1500ms.
func TestEveryWithFractionalSecondsIsRefused(t *testing.T) {
	for _, spec := range []string{"@every 1500ms", "@every 2500ms", "@every 1.5s", "@every 999ms", "@every 1m30.5s"} {
		_, err := Parse(spec, "")
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "whole seconds") || !strings.Contains(err.Error(), spec) {
			t.Errorf("Parse(%q) = %v; want an error naming the spec and asking for whole seconds", spec, err)
		}
	}
	for _, spec := range []string{"@every 1s", "@every 90s", "@every 2m", "@every 1h30m"} {
		s, err := Parse(spec, "")
		if err != nil {
			t.Errorf("Parse(%q): %v", spec, err)
			continue
		}
		at := time.Unix(0, 0).UTC()
		d, _ := time.ParseDuration(strings.TrimPrefix(spec, "@every "))
		if next := s.Next(at); !next.Equal(at.Add(d)) {
			t.Errorf("%q: Next(epoch) = %s; want %s", spec, next, at.Add(d))
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 1-3 * JAN-MAR MON", "@every 1h", "0 0 30 2 *", "1,2,3 * * * * *"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := Parse(spec, "America/New_York")
		if err != nil {
			return
		}
		at := time.Date(2026, 3, 7, 0, 0, 0, 0, time.UTC)
		for range 5 {
			next := s.Next(at)
			if next.IsZero() {
				return
			}
			if !next.After(at) {
				t.Fatalf("%q: Next(%s) = %s", spec, at, next)
			}
			at = next
		}
	})
}
