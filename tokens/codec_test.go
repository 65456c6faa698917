package tokens_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskling-go/taskling/tokens"
)

const (
	u1 = "aa000000-0000-0000-0000-000000000001"
	u2 = "aa000000-0000-0000-0000-000000000002"
)

func TestParseEmptyStringIsTheInitialList(t *testing.T) {
	l, err := tokens.Parse("")
	require.NoError(t, err)
	require.Empty(t, l.Tokens)
	require.Equal(t, "", l.String())
}

func TestParseAcceptsPartsInAnyOrder(t *testing.T) {
	l, err := tokens.Parse("G:7,I:" + u1 + ",S:0|S:1,G:0,I:" + u2)
	require.NoError(t, err)
	requireList(t, list(held(1, 7), avail(2)), l)
	require.Equal(t, "I:"+u1+",S:0,G:7|I:"+u2+",S:1,G:0", l.String(), "String is canonical")
}

func TestParseAcceptsEveryStatusAndLargestExecutionID(t *testing.T) {
	s := "I:" + u1 + ",S:0,G:9223372036854775807|I:" + u2 + ",S:2,G:3|I:aa000000-0000-0000-0000-000000000003,S:1,G:0"
	l, err := tokens.Parse(s)
	require.NoError(t, err)
	require.Equal(t, s, l.String())

	l, err = tokens.Parse("I:" + strings.ToUpper(u1) + ",S:3,G:0")
	require.NoError(t, err)
	requireList(t, list(unlimited(1, 0)), l)
}

func TestParseRejectsMalformedInput(t *testing.T) {
	tok := func(id, s, g string) string { return "I:" + id + ",S:" + s + ",G:" + g }
	good := tok(u1, "0", "5")
	for _, tc := range []struct {
		name  string
		in    string
		index int
		field string
	}{
		{"empty token between", good + "||" + tok(u2, "1", "0"), 1, "token"},
		{"trailing separator", good + "|", 1, "token"},
		{"leading separator", "|" + good, 0, "token"},
		{"only a separator", "|", 0, "token"},
		{"missing part", "I:" + u1 + ",S:0", 0, "token"},
		{"extra part", good + ",X:1", 0, "token"},
		{"empty part", good + ",", 0, "token"},
		{"part without colon", "I:" + u1 + ",S0,G:5", 0, "token"},
		{"unknown field", "I:" + u1 + ",S:0,X:5", 0, "token"},
		{"lower-case key", "i:" + u1 + ",S:0,G:5", 0, "token"},
		{"repeated field", "I:" + u1 + ",S:0,S:1", 0, "S"},
		{"empty id", tok("", "0", "5"), 0, "I"},
		{"bad uuid", good + "|" + tok("zz", "0", "5"), 1, "I"},
		{"braced uuid", tok("{"+u1+"}", "0", "5"), 0, "I"},
		{"bare hex uuid", tok(strings.ReplaceAll(u1, "-", ""), "0", "5"), 0, "I"},
		{"empty status", tok(u1, "", "5"), 0, "S"},
		{"status out of range", tok(u1, "4", "5"), 0, "S"},
		{"negative status", tok(u1, "-1", "5"), 0, "S"},
		{"two-digit status", tok(u1, "01", "5"), 0, "S"},
		{"empty grantee", tok(u1, "0", ""), 0, "G"},
		{"negative grantee", tok(u1, "0", "-5"), 0, "G"},
		{"signed grantee", tok(u1, "0", "+5"), 0, "G"},
		{"grantee overflows", tok(u1, "0", "9223372036854775808"), 0, "G"},
		{"grantee not a number", tok(u1, "0", "5x"), 0, "G"},
		{"space before token", " " + good, 0, "token"},
		{"space in value", tok(u1, "0", " 5"), 0, "G"},
		{"newline at end", good + "\n", 0, "G"},
		{"duplicate token id", good + "|" + tok(u1, "1", "0"), 1, "I"},
		{"unlimited after another", good + "|" + tok(u2, "3", "0"), 1, "S"},
		{"unlimited before another", tok(u2, "3", "0") + "|" + good, 0, "S"},
		{"two unlimited", tok(u1, "3", "0") + "|" + tok(u2, "3", "0"), 0, "S"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tokens.Parse(tc.in)
			require.ErrorIs(t, err, tokens.ErrMalformed)
			var fe *tokens.FormatError
			require.True(t, errors.As(err, &fe))
			require.Equal(t, tc.index, fe.Index, err.Error())
			require.Equal(t, tc.field, fe.Field, err.Error())
			require.Equal(t, strings.Split(tc.in, "|")[tc.index], fe.Token)
			require.NotEmpty(t, fe.Reason)
			require.Empty(t, l.Tokens, "no partial list on error")
		})
	}
}

func TestFormatErrorNamesTokenAndField(t *testing.T) {
	_, err := tokens.Parse("I:" + u1 + ",S:0,G:5|I:zz,S:0,G:5")
	require.EqualError(t, err, `tokens: token 1 ("I:zz,S:0,G:5"): field I: invalid UUID`)

	_, err = tokens.Parse("I:" + u1 + ",S:0")
	require.EqualError(t, err, `tokens: token 0 ("I:`+u1+`,S:0"): has 2 comma-separated parts, want 3 (I, S and G)`)
}

func TestFormatErrorTruncatesLongToken(t *testing.T) {
	long := "I:" + u1 + ",S:0,G:" + strings.Repeat("9", 5000)
	_, err := tokens.Parse(long)
	var fe *tokens.FormatError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, long[:100], fe.Token)
	require.Less(t, len(err.Error()), 400)
}
