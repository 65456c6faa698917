package execution

import (
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Reads and writes of rates (rates.go, 0023_rates.sql) in the token transactions' round trips.

// rateRow is what round trip 1 read of a task's rates: its task_rate row (if any) and the tats of
// the keys the decision may grant.
type rateRow struct {
	present                                         bool
	rate, keyRate                                   *string // the operator's overrides (nil: none)
	keyRates                                        string
	declaredRate, declaredKeyRate, declaredKeyRates string
	tat                                             int64
	keyTATs                                         map[string]int64
	// tatRate and keyTATRates are the rates (encodeRate) the tats were moved under.
	tatRate     string
	keyTATRates map[string]string
}

// configured reports whether the row puts the task or its keys under a rate (declared or
// overridden).
func (r *rateRow) configured() bool {
	if r == nil || !r.present {
		return false
	}
	return r.rate != nil && *r.rate != "" || r.keyRate != nil && *r.keyRate != "" || r.keyRates != "" ||
		r.declaredRate != "" || r.declaredKeyRate != "" || r.declaredKeyRates != ""
}

// apply parses the row into the overrides and the declaration it stores.
func (r *rateRow) apply(o *Overrides, declared *Settings) error {
	if r == nil || !r.present {
		return nil
	}
	var err error
	for _, f := range []struct {
		raw  *string
		into **Rate
	}{{r.rate, &o.Rate}, {r.keyRate, &o.KeyRate}} {
		if f.raw != nil {
			v, err := decodeRate(*f.raw)
			if err != nil {
				return err
			}
			*f.into = &v
		}
	}
	if o.KeyRates, err = ParseKeyRates(r.keyRates); err != nil {
		return err
	}
	if declared.Rate, err = decodeRate(r.declaredRate); err != nil {
		return err
	}
	if declared.KeyRate, err = decodeRate(r.declaredKeyRate); err != nil {
		return err
	}
	declared.KeyRates, err = ParseKeyRates(r.declaredKeyRates)
	return err
}

// noteRated remembers whether task id is under a rate, as its last read (at nowUS) found it, and
// if so what it read, for refusals on the cached state (rates_fast.go).
func (s *Store) noteRated(id int64, r *rateRow, nowUS int64) {
	if !r.configured() {
		s.rated.Delete(id)
		return
	}
	s.rated.Store(id, true)
	s.noteRates(id, r, nowUS)
}

// isRated reports whether task id was under a rate when last read.
func (s *Store) isRated(id int64) bool {
	_, ok := s.rated.Load(id)
	return ok
}

// rateReadSQL reads task $2's rates: its task_rate row and the tats of the keys the decision may
// grant — the requests' ($3), those of the requests' tickets ($4), of the first $5 keys in
// round-robin order and of the $6 oldest tickets (the keys keyTicketsSQL's tickets have). No row:
// the task never had a rate.
const rateReadSQL = `
WITH ks AS (
    SELECT unnest($3::text[]) AS key
    UNION
    SELECT x.key FROM taskling.key_ticket x WHERE x.stripe = $1 AND x.task_id = $2 AND x.id = ANY($4::bigint[])
    UNION
    (SELECT k.key FROM taskling.task_key k
     WHERE k.stripe = $1 AND k.task_id = $2 AND k.waiting > 0
     ORDER BY k.top_priority DESC, k.pass, k.granted_us, k.key LIMIT $5)
    UNION
    (SELECT x.key FROM taskling.key_ticket x WHERE x.stripe = $1 AND x.task_id = $2 ORDER BY x.queued_us, x.id LIMIT $6)
)
SELECT r.rate, r.key_rate, r.key_rates, r.declared_rate, r.declared_key_rate, r.declared_key_rates, r.tat_us, r.tat_rate,
    coalesce(kr.keys, '{}'), coalesce(kr.tats, '{}'), coalesce(kr.rates, '{}')
FROM taskling.task_rate r
LEFT JOIN LATERAL (
    SELECT array_agg(k.key) AS keys, array_agg(k.tat_us) AS tats, array_agg(k.tat_rate) AS rates FROM taskling.key_rate k
    WHERE k.stripe = $1 AND k.task_id = $2 AND k.key IN (SELECT key FROM ks)
) kr ON true
WHERE r.stripe = $1 AND r.task_id = $2`

// rateReadSQLs are rateReadSQL for each stripe (partitionsOf).
var rateReadSQLs = partitionsOf(rateReadSQL)

// queueRateReads queues, for each task, the read of its rates; the map is filled once the batch
// is sent (a task with no row gets an empty one).
func (s *Store) queueRateReads(b *txBatch, tasks map[int64][]*op, want map[int64]int) map[int64]*rateRow {
	out := map[int64]*rateRow{}
	for _, id := range slices.Sorted(maps.Keys(tasks)) {
		keys, tickets := requested(tasks[id], []string{""})
		candidates, oldest := 0, 0
		if level, ok := s.keyReadsWanted(id, want); ok {
			candidates, _, oldest = keyReadWidths(level)
		}
		r := &rateRow{keyTATs: map[string]int64{}, keyTATRates: map[string]string{}}
		out[id] = r
		b.Queue(rateReadSQLs[id%stripeCount], int16(id%stripeCount), id, keys, tickets, candidates, oldest).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var keys, rates []string
				var tats []int64
				if err := rows.Scan(&r.rate, &r.keyRate, &r.keyRates, &r.declaredRate, &r.declaredKeyRate, &r.declaredKeyRates, &r.tat,
					&r.tatRate, &keys, &tats, &rates); err != nil {
					return err
				}
				r.present = true
				for i, k := range keys {
					r.keyTATs[k], r.keyTATRates[k] = tats[i], rates[i]
				}
			}
			return rows.Err()
		})
	}
	return out
}

// ratePlan is what a rated decision writes: the task's tat and declaration, keys' tats, and the
// rows of keys whose rate is spent and that have no holder or waiter. A tat the decision's grants
// moved is written as the later of its stored value and the database clock at the write, plus the
// units granted (delta, in µs): the write comes after the grants' start times, so the rate holds
// over the recorded start times, not only over the decision's clock (docs/how-it-works.md).
type ratePlan struct {
	tat, tatDelta                                   int64
	tatRate                                         string            // the task rate it moves under
	keyTATRates                                     map[string]string // the keys' rates
	declaredRate, declaredKeyRate, declaredKeyRates string
	keyTATs, keyDeltas                              map[string]int64
	drops                                           []string
	nowUS                                           int64
}

// The rate writes; the database clock in µs is (extract(epoch FROM clock_timestamp()) * 1000000).
const (
	// upsertTaskRateSQL writes a task's tat ($3 stored, $4 the units granted) and declaration.
	upsertTaskRateSQL = `
INSERT INTO taskling.task_rate AS r (stripe, task_id, tat_us, declared_rate, declared_key_rate, declared_key_rates, tat_rate)
VALUES ($1, $2, CASE WHEN $4::bigint > 0 THEN greatest($3::bigint, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) + $4 ELSE $3 END,
    $5, $6, $7, $8)
ON CONFLICT (stripe, task_id) DO UPDATE
SET tat_us = EXCLUDED.tat_us, declared_rate = EXCLUDED.declared_rate, declared_key_rate = EXCLUDED.declared_key_rate,
    declared_key_rates = EXCLUDED.declared_key_rates, tat_rate = EXCLUDED.tat_rate`

	// upsertKeyRatesSQL writes keys' tats (stored, and the units granted).
	upsertKeyRatesSQL = `
INSERT INTO taskling.key_rate AS k (stripe, task_id, key, tat_us, tat_rate)
SELECT $1, $2, r.key, greatest(r.tat, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint) + r.delta, r.rate
FROM unnest($3::text[], $4::bigint[], $5::bigint[], $6::text[]) AS r(key, tat, delta, rate)
ON CONFLICT (stripe, task_id, key) DO UPDATE SET tat_us = EXCLUDED.tat_us, tat_rate = EXCLUDED.tat_rate`

	// dropKeyRatesSQL deletes the rows of keys ($3) whose rate is spent at $4 (their tat has passed).
	dropKeyRatesSQL = `DELETE FROM taskling.key_rate WHERE stripe = $1 AND task_id = $2 AND key = ANY($3::text[]) AND tat_us <= $4`
)

// The rate writes for each stripe (partitionsOf).
var (
	upsertTaskRateSQLs = partitionsOf(upsertTaskRateSQL)
	upsertKeyRatesSQLs = partitionsOf(upsertKeyRatesSQL)
	dropKeyRatesSQLs   = partitionsOf(dropKeyRatesSQL)
)

// queueRateWrites queues a rated task's writes.
func queueRateWrites(b *txBatch, id int64, p *ratePlan) {
	stripe := int16(id % stripeCount)
	b.Queue(upsertTaskRateSQLs[stripe], stripe, id, p.tat, p.tatDelta, p.declaredRate, p.declaredKeyRate, p.declaredKeyRates, p.tatRate)
	if len(p.keyDeltas) > 0 {
		keys := slices.Sorted(maps.Keys(p.keyDeltas))
		tats, deltas, rates := make([]int64, len(keys)), make([]int64, len(keys)), make([]string, len(keys))
		for i, k := range keys {
			tats[i], deltas[i], rates[i] = p.keyTATs[k], p.keyDeltas[k], p.keyTATRates[k]
		}
		b.Queue(upsertKeyRatesSQLs[stripe], stripe, id, keys, tats, deltas, rates)
	}
	if len(p.drops) > 0 {
		b.Queue(dropKeyRatesSQLs[stripe], stripe, id, p.drops, p.nowUS)
	}
}

// ParseKeyRates parses a key_rates or declared_key_rates column ("K:<key, hex>,R:<rate>|…"); ""
// is none.
func ParseKeyRates(s string) (map[string]Rate, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]Rate{}
	for i, p := range strings.Split(s, "|") {
		var v [2]string
		if err := keyFields(p, []string{"K", "R"}, v[:]); err != nil {
			return nil, fmt.Errorf("%w: key rate %d: %v", errMalformedKeys, i, err)
		}
		key, err := decodeKey(v[0])
		if err != nil {
			return nil, fmt.Errorf("%w: key rate %d (%.100q): bad key", errMalformedKeys, i, p)
		}
		if out[key], err = decodeRate(v[1]); err != nil {
			return nil, fmt.Errorf("%w: rate of key %q: %v", errMalformedKeys, key, err)
		}
	}
	return out, nil
}

// FormatKeyRates writes named keys' rates as ParseKeyRates reads them, in key order.
func FormatKeyRates(rates map[string]Rate) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(rates)) {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("K:" + hex.EncodeToString([]byte(k)) + ",R:" + encodeRate(rates[k]))
	}
	return b.String()
}
