package execution

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Releases the old primary acknowledged but a failover lost would leave their slots held for as
// long as their process heartbeats its session. So a Store remembers the releases it made
// recently and, when it sees the database write on another timeline (or a timeline recorded
// anew), sends them again as retries: one already recorded is a no-op, a lost one goes through,
// and one whose grant was lost too finds nothing to return.

// epochSupport says whether the schema has taskling.epoch (migration 0012), taskling.handoff
// (0013), the stripe tables (0019), keys (0022) and rates (0023), looked up once.
type epochSupport struct {
	known, has, handoffs, stripes, keys, rates atomic.Bool
}

// detectEpochs looks up, once, whether the schema has taskling.epoch, taskling.handoff, the
// stripes and keys. It
// runs before a token transaction takes its connection (a pool of one connection must not wait
// for itself).
func (s *Store) detectEpochs(ctx context.Context) error {
	if s.epochs.known.Load() {
		return nil
	}
	var has, handoffs, stripes, keys, rates bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('taskling.epoch') IS NOT NULL, to_regclass('taskling.handoff') IS NOT NULL,
    to_regclass('taskling.stripe_00') IS NOT NULL, to_regclass('taskling.key_ticket') IS NOT NULL,
    to_regclass('taskling.key_rate') IS NOT NULL`).Scan(&has, &handoffs, &stripes, &keys, &rates); err != nil {
		return fmt.Errorf("look for taskling.epoch: %w", err)
	}
	s.epochs.has.Store(has)
	s.epochs.handoffs.Store(handoffs)
	s.epochs.stripes.Store(stripes)
	s.epochs.keys.Store(keys)
	s.epochs.rates.Store(rates)
	s.epochs.known.Store(true)
	return nil
}

// clockQuery is the clock statement the schema supports.
func (s *Store) clockQuery() string {
	if s.epochs.has.Load() {
		return clockSQL
	}
	return legacyClockSQL
}

// recentWindow and recentMax bound what is remembered: asynchronous standbys lag seconds.
const (
	recentWindow = 5 * time.Minute
	recentMax    = 2000
)

type recentReleases struct {
	mu   sync.Mutex
	list []recentRelease
}

type recentRelease struct {
	req ReleaseRequest
	at  time.Time
}

// noteReleased remembers a release that committed.
func (s *Store) noteReleased(req ReleaseRequest) {
	r := &s.recent
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	drop := 0
	for drop < len(r.list) && (now.Sub(r.list[drop].at) > recentWindow || len(r.list)-drop >= recentMax) {
		drop++
	}
	r.list = append(r.list[drop:], recentRelease{req: req, at: now})
}

// sawEpoch records the epoch a token transaction read; a different one than before means a
// failover or a restore: the recent releases are sent again, in the background.
func (s *Store) sawEpoch(ep epoch) {
	prev := s.epoch.Swap(&ep)
	if prev != nil && prev.timeline != 0 && ep.timeline != 0 && (prev.timeline != ep.timeline || prev.sinceUS != ep.sinceUS) {
		// Ids reserved from the old primary's sequence may come back from the new one's (it
		// rewinds with lost WAL): drop them, and the rows cached from the old primary. (Ids
		// also carry their epoch: those a transaction on the old one remembers later are
		// dropped when taken.)
		s.cache.mu.Lock()
		s.cache.ids, s.cache.rows = nil, map[int64]taskRow{}
		s.cache.mu.Unlock()
		s.replayReleases()
	}
}

// sawTimeline is sawEpoch for a heartbeat, which reads the timeline only.
func (s *Store) sawTimeline(timeline int32) {
	if prev := s.epoch.Load(); prev != nil && prev.timeline != 0 && prev.timeline != timeline {
		s.replayReleases()
	}
}

func (s *Store) replayReleases() {
	r := &s.recent
	r.mu.Lock()
	list := r.list
	r.list = nil
	r.mu.Unlock()
	if len(list) == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for _, rr := range list {
			req := rr.req
			req.Retry = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = s.Release(ctx, req) // combined; an error leaves the slot to its process's heartbeat
			}()
		}
		wg.Wait()
	}()
}
