package execution

import "time"

// Exported forms of the stored rate codec (rates.go), for the operators' store (adminstore),
// which writes and reads task_rate's override columns outside the token transactions.

// EncodeRate writes r as task_rate's columns hold it: "<count>/<per µs>/<burst>", "" for none.
func EncodeRate(r Rate) string { return encodeRate(r) }

// DecodeRate reads EncodeRate's form ("" is none), validating the rate.
func DecodeRate(s string) (Rate, error) { return decodeRate(s) }

// NextAllowed is how long after nowUS a start of cost 1 fits r, whose theoretical arrival time is
// tatUS (0 for no rate): the read side's view of rateWait.
func NextAllowed(r Rate, tatUS, nowUS int64) time.Duration {
	if r.IsZero() || r.Count <= 0 {
		return 0
	}
	return rateWait(r, tatUS, nowUS, 0, 1)
}
