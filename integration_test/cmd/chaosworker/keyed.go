package main

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/taskling-go/taskling/taskling"
)

// keyed is the -keys mode (TestChaosKeys): every start of the plain loop names one of n keys,
// drawn from a Zipf distribution (a few keys take most of the starts), and a cost from 1 to the
// smaller of maxCost and its key's limit.
type keyed struct {
	n       int
	skew    float64
	limit   int            // TaskSettings.KeyLimit
	named   map[string]int // TaskSettings.Keys
	maxCost int
}

// parseKeyed reads -keys, -key-skew, -key-limit, -named-keys ("key=limit,…") and -max-cost; nil
// when n is 0.
func parseKeyed(n int, skew float64, limit int, named string, maxCost int) (*keyed, error) {
	if n == 0 {
		return nil, nil
	}
	k := &keyed{n: n, skew: skew, limit: limit, named: map[string]int{}, maxCost: max(maxCost, 1)}
	if named != "" {
		for _, s := range strings.Split(named, ",") {
			name, lim, ok := strings.Cut(s, "=")
			var l int
			if _, err := fmt.Sscan(lim, &l); !ok || err != nil {
				return nil, fmt.Errorf("bad -named-keys entry %q", s)
			}
			k.named[name] = l
		}
	}
	return k, nil
}

// KeyName is the name of key i, as the test names them.
func KeyName(i uint64) string { return fmt.Sprintf("k%02d", i) }

// settings adds the key limits to s.
func (k *keyed) settings(s taskling.TaskSettings) taskling.TaskSettings {
	if k == nil {
		return s
	}
	s.KeyLimit = k.limit
	s.Keys = map[string]taskling.KeySettings{}
	for name, l := range k.named {
		s.Keys[name] = taskling.KeySettings{Limit: l}
	}
	return s
}

// picker draws keys and costs for one goroutine (rnd is that goroutine's).
type picker struct {
	k    *keyed
	zipf *rand.Zipf
	rnd  *rand.Rand
}

func (k *keyed) picker(rnd *rand.Rand) *picker {
	if k == nil {
		return nil
	}
	return &picker{k: k, zipf: rand.NewZipf(rnd, k.skew, 1, uint64(k.n-1)), rnd: rnd}
}

// options sets the key and cost of the next start in o.
func (p *picker) options(o *taskling.StartOptions) {
	if p == nil {
		return
	}
	o.Key = KeyName(p.zipf.Uint64())
	limit := p.k.limit
	if l, ok := p.k.named[o.Key]; ok {
		limit = l
	}
	if limit <= 0 {
		limit = p.k.maxCost
	}
	o.Cost = 1 + p.rnd.IntN(min(p.k.maxCost, limit))
}
