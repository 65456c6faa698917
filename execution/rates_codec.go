package execution

// Exported forms of the stored rate codec (rates.go), for the operators' store (adminstore),
// which writes and reads task_rate's override columns outside the token transactions.

// EncodeRate writes r as task_rate's columns hold it: "<count>/<per µs>/<burst>", "" for none.
func EncodeRate(r Rate) string { return encodeRate(r) }

// DecodeRate reads EncodeRate's form ("" is none), validating the rate.
func DecodeRate(s string) (Rate, error) { return decodeRate(s) }
