package execution

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/taskling-go/taskling/tasklingtype"
)

// Rates (grant protocol 7; docs/rates.md, 0023_rates.sql): a task, and each of its keys, may be
// under a rate — at most Count units per Per, Burst at once, a start of cost c taking c units. A
// rate is a GCRA on the database clock: its state is one time, the theoretical arrival time (tat),
// which a grant of cost c moves to max(tat, now) + c·T, T = Per/Count rounded up to the µs. A cost c
// fits when max(tat, now) + c·T <= now + Burst·T. In a half-open window [a, a+Per) whose grants
// are c1..cn at t1 <= … <= tn: the tat after the first is at least t1 + c1·T >= a + c1·T, and each
// grant moves it by its cost, so before the last it is at least a + (c1+…+c(n-1))·T, and the last
// fits only if that plus cn·T is at most tn + Burst·T < a + Per + Burst·T <= a + (Count+Burst)·T:
// c1+…+cn < Count + Burst. Rounding T up only lowers the rate. A cost above Burst never fits.

// errRatesUnsupported: a rated request on a schema without rates.
var errRatesUnsupported = errors.New("rates need migration 0023 (grant protocol 7): run migrations.Up")

// Bounds of a rate.
const (
	MaxRateCount = 1_000_000
	MinRatePer   = time.Millisecond
	MaxRatePer   = 24 * time.Hour
)

// Rate is at most Count units per Per, at most Burst at once (Burst 0 means 1). The zero Rate is
// none.
type Rate struct {
	Count int
	Per   time.Duration
	Burst int
}

// IsZero reports no rate.
func (r Rate) IsZero() bool { return r == Rate{} }

// burst is the units that may be granted at once (at least 1).
func (r Rate) burst() int64 { return int64(max(r.Burst, 1)) }

// intervalUS is T, the µs one unit takes, rounded up (so the rate is never exceeded).
func (r Rate) intervalUS() int64 {
	per := r.Per.Microseconds()
	return max(1, (per+int64(r.Count)-1)/int64(r.Count))
}

// Validate checks r (the zero Rate is valid: none); field and in name it in the error.
func (r Rate) Validate(field, in string) error {
	if r.IsZero() {
		return nil
	}
	switch {
	case r.Count < 1 || r.Count > MaxRateCount:
		return invalid(field, "%s%s has Count %d; want 1 to %d", field, in, r.Count, MaxRateCount)
	case r.Per < MinRatePer || r.Per > MaxRatePer:
		return invalid(field, "%s%s has Per %s; want %s to %s", field, in, r.Per, MinRatePer, MaxRatePer)
	case r.Per%time.Microsecond != 0:
		return invalid(field, "%s%s has Per %s; want whole microseconds", field, in, r.Per)
	case r.Burst < 0 || r.Burst > MaxRateCount:
		return invalid(field, "%s%s has Burst %d; want 1 to %d (0: 1)", field, in, r.Burst, MaxRateCount)
	}
	return nil
}

// String writes r as ParseRate reads it: "100/1m", "500/1s,burst=50"; "" for none.
func (r Rate) String() string { return tasklingtype.Rate(r).String() }

// errBadRate is wrapped by ParseRate's errors.
var errBadRate = errors.New(`want COUNT/PER[,burst=B], such as "100/1m" or "500/1s,burst=50"`)

// ParseRate reads a rate as Rate.String writes it: COUNT/PER with PER a Go duration ("1m", "30s";
// a bare unit means one of it: "100/m"), optionally ",burst=B". "" and "none" are no rate. The
// rate is validated.
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return Rate{}, nil
	}
	main, burst, hasBurst := strings.Cut(s, ",")
	count, per, ok := strings.Cut(main, "/")
	if !ok {
		return Rate{}, fmt.Errorf("rate %q: %w", s, errBadRate)
	}
	var r Rate
	var err error
	if r.Count, err = strconv.Atoi(strings.TrimSpace(count)); err != nil {
		return Rate{}, fmt.Errorf("rate %q: count: %w", s, errBadRate)
	}
	per = strings.TrimSpace(per)
	if per != "" && (per[0] < '0' || per[0] > '9') {
		per = "1" + per
	}
	if r.Per, err = time.ParseDuration(per); err != nil {
		return Rate{}, fmt.Errorf("rate %q: per: %w", s, errBadRate)
	}
	if hasBurst {
		b, ok := strings.CutPrefix(strings.TrimSpace(burst), "burst=")
		if r.Burst, err = strconv.Atoi(b); !ok || err != nil || r.Burst < 1 {
			return Rate{}, fmt.Errorf("rate %q: burst: %w", s, errBadRate)
		}
	}
	if err := r.Validate("rate", ""); err != nil {
		return Rate{}, err
	}
	return r, nil
}

// encodeRate writes r for a column of 0023: "<count>/<per µs>/<burst>", "" for none.
func encodeRate(r Rate) string {
	if r.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d/%d/%d", r.Count, r.Per.Microseconds(), r.burst())
}

// decodeRate reads encodeRate's form.
func decodeRate(s string) (Rate, error) {
	if s == "" {
		return Rate{}, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return Rate{}, fmt.Errorf("stored rate %q: want count/per/burst", s)
	}
	var n [3]int64
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return Rate{}, fmt.Errorf("stored rate %q: %w", s, err)
		}
		n[i] = v
	}
	r := Rate{Count: int(n[0]), Per: time.Duration(n[1]) * time.Microsecond, Burst: int(n[2])}
	if err := r.Validate("rate", " (stored)"); err != nil {
		return Rate{}, err
	}
	return r, nil
}

// rateRoom is how many units of r fit at nowUS with tat; 0 before holdUntilUS (a new timeline's
// hold, 0: none).
func rateRoom(r Rate, tat, nowUS, holdUntilUS int64) int64 {
	if nowUS < holdUntilUS {
		return 0
	}
	t := r.intervalUS()
	return max(0, (nowUS+r.burst()*t-max(tat, nowUS))/t)
}

// rateTake is the tat after a grant of cost at nowUS.
func rateTake(r Rate, tat, nowUS int64, cost int) int64 {
	return max(tat, nowUS) + int64(cost)*r.intervalUS()
}

// rateWait is how long until cost fits r (cost <= its burst), on the database clock.
func rateWait(r Rate, tat, nowUS, holdUntilUS int64, cost int) time.Duration {
	at := max(holdUntilUS, tat-(r.burst()-int64(cost))*r.intervalUS())
	return max(0, time.Duration(at-nowUS)*time.Microsecond)
}

// RateOf is key's rate with declared in force under o, and where it comes from (the sources of
// KeyLimitOf): the operator's override for the key, else the operator's KeyRate, else the rate
// declared for the key, else the declared KeyRate.
func RateOf(key string, declared Settings, o Overrides) (Rate, string) {
	if r, ok := o.KeyRates[key]; ok {
		return r, KeySourceOverride
	}
	if o.KeyRate != nil {
		return *o.KeyRate, KeySourceKeyLimitOverride
	}
	if r, ok := declared.KeyRates[key]; ok {
		return r, KeySourceDeclaredKey
	}
	return declared.KeyRate, KeySourceDeclared
}

// Rated reports whether declared settings put the task or its keys under a rate.
func (s Settings) Rated() bool { return !s.Rate.IsZero() || !s.KeyRate.IsZero() || len(s.KeyRates) > 0 }

// Rated reports whether o overrides a rate.
func (o Overrides) Rated() bool { return o.Rate != nil || o.KeyRate != nil || len(o.KeyRates) > 0 }
