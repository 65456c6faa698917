package tasklingtype

import (
	"strconv"
	"time"
)

// Rate is at most Count units per Per, at most Burst at once (0 means 1): "100/1m",
// "500/1s,burst=50" as taskling.ParseRate reads it and String writes it. The zero Rate is none.
// It is declared here, below the grant protocol, so that the read side's types (SettingsUpdate,
// TaskInfo, KeyInfo) hold the same type as TaskSettings; the protocol's execution.Rate has the
// same fields and converts to and from it.
type Rate struct {
	Count int
	Per   time.Duration
	Burst int
}

// IsZero reports no rate.
func (r Rate) IsZero() bool { return r == Rate{} }

// String writes r as taskling.ParseRate reads it: "100/1m", "500/1s,burst=50"; "" for none.
func (r Rate) String() string {
	if r.IsZero() {
		return ""
	}
	s := strconv.Itoa(r.Count) + "/" + shortDuration(r.Per)
	if r.Burst > 1 {
		s += ",burst=" + strconv.Itoa(r.Burst)
	}
	return s
}

// shortDuration writes d without the zero units time.Duration.String adds ("1m", not "1m0s").
func shortDuration(d time.Duration) string {
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.name
		}
	}
	return d.String()
}
