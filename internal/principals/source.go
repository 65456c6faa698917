package principals

import (
	"bytes"
	"sync"
	"time"
)

// CheckInterval is how often, at most, a Source looks at its file: an edit takes effect at the
// first request after it that comes at least this long after the previous look.
const CheckInterval = time.Second

// Source is the principals a server knows: those of a file, reread when its text changes, and
// the single API token's (TokenName). It needs no goroutine: Current looks at the file when
// asked, at most once per CheckInterval.
type Source struct {
	path, token string
	now         func() time.Time
	read        func(path string) ([]byte, error) // ReadFile; tests slow it down

	mu      sync.Mutex
	checked time.Time
	looking bool // a look at the file is under way, outside mu: the others use current meanwhile
	current *Set

	// Only the one look under way uses these (looking hands them from one look to the next).
	text    []byte
	good    *Set   // the principals of the file's last valid text, the token's included
	problem string // why the file's current text is refused ("" when it is not)
}

// NewSource reads the file at path ("": no file) and returns its principals with the token's
// ("": none). An unreadable or invalid file is an error.
func NewSource(path, token string) (*Source, error) {
	s := &Source{path: path, token: token, now: time.Now, read: ReadFile}
	s.current = NewSet(nil, token)
	if path == "" {
		return s, nil
	}
	text, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	ps, err := Parse(text)
	if err != nil {
		return nil, err
	}
	s.text, s.checked = text, s.now()
	s.current = NewSet(ps, token)
	s.good = s.current
	return s, nil
}

// Change is what a look at the file found, when its text changed.
type Change struct {
	// Gone names the principals the file no longer has with the same token: removed, or given
	// another token. Their sessions must end.
	Gone []string
	// Problem, when not "", says why the new text is refused: until it is fixed only the token's
	// principal is known (the sessions of the others are refused, not ended).
	Problem string
}

// Current returns the principals known now. When the file's text changed since the last look,
// it also returns what changed (nil otherwise). The file is read outside the Source's lock: while
// one call looks at it, the others return the principals of the previous look without waiting.
func (s *Source) Current() (*Set, *Change) {
	set, due := s.due()
	if !due {
		return set, nil
	}
	next, change := s.look() // outside the lock: the file may be slow to read
	s.mu.Lock()
	defer s.mu.Unlock()
	s.looking = false
	if next != nil {
		s.current = next
	}
	return s.current, change
}

// due returns the principals known now, and whether the caller is to look at the file: the
// first call a CheckInterval after the last look, when no look is under way.
func (s *Source) due() (*Set, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.path == "" || s.looking || now.Sub(s.checked) < CheckInterval {
		return s.current, false
	}
	s.checked, s.looking = now, true
	return s.current, true
}

// look reads the file and returns its principals and what changed, or nil when its text did not
// change. Only the look under way calls it.
func (s *Source) look() (*Set, *Change) {
	text, err := s.read(s.path)
	if err == nil && bytes.Equal(text, s.text) && s.problem == "" {
		return nil, nil
	}
	var ps []Principal
	if err == nil {
		ps, err = Parse(text)
	}
	if err != nil {
		s.text = nil // fail closed: a removal must never be undone by a typo
		refused := NewSet(nil, s.token)
		if err.Error() == s.problem {
			return refused, nil // reported already
		}
		s.problem = err.Error()
		return refused, &Change{Problem: s.problem}
	}
	next := NewSet(ps, s.token)
	c := &Change{}
	if s.good != nil {
		c.Gone = s.good.Gone(next)
	}
	s.text, s.good, s.problem = text, next, ""
	return next, c
}
