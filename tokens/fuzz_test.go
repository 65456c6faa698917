package tokens_test

import "testing"

// FuzzParse: Parse never panics; it either fails with a *FormatError naming I, S, G or token,
// or returns a list whose canonical form parses back to the same list.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"I:" + u1 + ",S:1,G:0",
		"I:" + u1 + ",S:0,G:7|I:" + u2 + ",S:2,G:9223372036854775807",
		"G:7,S:0,I:" + u1 + "|S:1,I:" + u2 + ",G:0",
		"I:" + u1 + ",S:3,G:0",
		"I:" + u1 + ",S:0,G:5|I:zz,S:0,G:5",
		"I:" + u1 + ",S:0,G:5||I:" + u2 + ",S:1,G:0",
		"I:" + u1 + ",S:0,G:5|",
		"|",
		"I:" + u1 + ",S:0",
		"I:" + u1 + ",S:0,S:1",
		"I:" + u1 + ",S:4,G:5",
		"I:" + u1 + ",S:0,G:-5",
		"I:" + u1 + ",S:0,G:9223372036854775808",
		" I:" + u1 + ",S:0,G:5",
		"I:{" + u1 + "},S:0,G:5",
		"I:" + u1 + ",S:0,G:5|I:" + u1 + ",S:1,G:0",
		"I:" + u1 + ",S:0,G:5|I:" + u2 + ",S:3,G:0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkParse(t, s) })
}
