package tasklingtype

import "time"

// APISession is one sign-in session: who signed in (Principal), what the server checks their
// credential against (Credential, opaque here), when, and until when.
type APISession struct {
	Principal  string
	Credential string
	CreatedAt  time.Time
	ExpiresAt  time.Time
}
