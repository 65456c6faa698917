package main

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/taskling-go/taskling/taskling"
)

// keyed is the -keys mode (TestChaosKeys): every start of the plain loop names one of n keys,
// drawn from a Zipf distribution (a few keys take most of the starts), and a cost from 1 to the
// smallest of maxCost, its key's limit and the bursts of the rates over it (a cost above a burst
// never fits).
type keyed struct {
	n        int
	skew     float64
	limit    int            // TaskSettings.KeyLimit
	named    map[string]int // TaskSettings.Keys' limits
	maxCost  int
	rate     taskling.Rate            // TaskSettings.Rate
	keyRates map[string]taskling.Rate // TaskSettings.Keys' rates
}

// parseKeyed reads -keys, -key-skew, -key-limit, -named-keys ("key=limit,…"), -max-cost, -rate
// and -key-rates ("key=rate;…", a rate as taskling.ParseRate reads it); nil when n is 0.
func parseKeyed(n int, skew float64, limit int, named string, maxCost int, rate, keyRates string) (*keyed, error) {
	if n == 0 {
		return nil, nil
	}
	k := &keyed{n: n, skew: skew, limit: limit, named: map[string]int{}, maxCost: max(maxCost, 1), keyRates: map[string]taskling.Rate{}}
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
	var err error
	if k.rate, err = taskling.ParseRate(rate); err != nil {
		return nil, fmt.Errorf("bad -rate: %w", err)
	}
	if keyRates != "" {
		for _, s := range strings.Split(keyRates, ";") {
			name, r, ok := strings.Cut(s, "=")
			if !ok {
				return nil, fmt.Errorf("bad -key-rates entry %q", s)
			}
			if k.keyRates[name], err = taskling.ParseRate(r); err != nil {
				return nil, fmt.Errorf("bad -key-rates entry %q: %w", s, err)
			}
		}
	}
	return k, nil
}

// KeyName is the name of key i, as the test names them.
func KeyName(i uint64) string { return fmt.Sprintf("k%02d", i) }

// settings adds the key limits and the rates to s (a key named for its rate alone has Limit 0:
// KeyLimit's).
func (k *keyed) settings(s taskling.TaskSettings) taskling.TaskSettings {
	if k == nil {
		return s
	}
	s.KeyLimit, s.Rate = k.limit, k.rate
	s.Keys = map[string]taskling.KeySettings{}
	for name, l := range k.named {
		s.Keys[name] = taskling.KeySettings{Limit: l}
	}
	for name, r := range k.keyRates {
		ks := s.Keys[name]
		ks.Rate = r
		s.Keys[name] = ks
	}
	return s
}

// maxCostOf is the largest cost a start of key may have: maxCost, at most the key's limit and
// the bursts of the task's rate and the key's.
func (k *keyed) maxCostOf(key string) int {
	c := k.maxCost
	if l, ok := k.named[key]; ok {
		c = min(c, l)
	} else if k.limit > 0 {
		c = min(c, k.limit)
	}
	for _, r := range []taskling.Rate{k.rate, k.keyRates[key]} {
		if !r.IsZero() {
			c = min(c, max(r.Burst, 1))
		}
	}
	return c
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
	o.Cost = 1 + p.rnd.IntN(p.k.maxCostOf(o.Key))
}
