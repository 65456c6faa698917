package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/taskling"
)

// blocksPer are the blocks per execution measured (-blocks-per): the execution's own start, take
// and completion are shared by fewer or more blocks.
var blocksPer = []int{10, 50}

const (
	blocksProcs      = 4
	blocksGoroutines = 4
	itemsN           = 20000
	itemsBlockSize   = 1000
)

// blocksResult is what the block scenarios measured.
type blocksResult struct {
	d      time.Duration
	rounds int
	// blocks and raw are the blocks completed over every window, by blocks per execution; ratios
	// are each round's.
	blocks, raw map[int]int64
	ratios      map[int][]float64
	// blocksBusy and rawBusy are the fraction of the machine's CPU (every process, every core)
	// busy in the measuring windows, by blocks per execution: when both are near 1, each mode's
	// rate is what its blocks cost in CPU, and the ratio is theirs.
	blocksBusy, rawBusy map[int]float64
	items, itemsRaw     map[taskling.CommitMode]float64
	modeNames           map[taskling.CommitMode]string
}

// blocks measures the block scenarios: per blocks per execution, rounds windows of d of each mode,
// alternating taskling, raw, raw, taskling, … (with an even number of rounds, a machine whose
// speed drifts steadily between windows, as this one's does by ±15 %, biases neither), then the
// list items' commits.
func (e *environment) blocks(ctx context.Context, d time.Duration, rounds int) (*blocksResult, error) {
	r := &blocksResult{d: d, rounds: rounds, blocks: map[int]int64{}, raw: map[int]int64{}, ratios: map[int][]float64{},
		blocksBusy: map[int]float64{}, rawBusy: map[int]float64{}, items: map[taskling.CommitMode]float64{}, itemsRaw: map[taskling.CommitMode]float64{},
		modeNames: map[taskling.CommitMode]string{taskling.CommitEachItem: "each item", taskling.CommitPeriodically: "every 100",
			taskling.CommitAtEnd: "at the end"}}
	for _, per := range blocksPer {
		for round := range rounds {
			modes := []string{"blocks", "rawblocks"}
			if round%2 == 1 {
				modes[0], modes[1] = modes[1], modes[0]
			}
			var got [2]int64
			for _, mode := range modes {
				fmt.Printf("blocks: %s, %d processes × %d goroutines, %d blocks per execution, %s (round %d/%d)…\n", mode, blocksProcs, blocksGoroutines, per, d, round+1, rounds)
				n, busy, err := e.blockWindow(ctx, mode, per, d)
				if err != nil {
					return nil, err
				}
				if mode == "blocks" {
					r.blocks[per] += n
					r.blocksBusy[per] += busy / float64(rounds)
					got[0] = n
				} else {
					r.raw[per] += n
					r.rawBusy[per] += busy / float64(rounds)
					got[1] = n
				}
			}
			r.ratios[per] = append(r.ratios[per], float64(got[0])/float64(max(1, got[1])))
		}
	}
	fmt.Printf("blocks: %d list items committed in each mode, blocks of %d…\n", itemsN, itemsBlockSize)
	pool, done, err := e.fresh(ctx, 0, nil)
	if err != nil {
		return nil, err
	}
	defer done()
	client, err := taskling.NewClient(pool, &taskling.Config{HostName: "bench-items", Defaults: taskling.TaskSettings{ConcurrencyLimit: -1}})
	if err != nil {
		return nil, err
	}
	defer client.Close()
	for _, mode := range []taskling.CommitMode{taskling.CommitEachItem, taskling.CommitPeriodically, taskling.CommitAtEnd} {
		if r.items[mode], err = bench.ItemCommits(ctx, client, "bench", "items", mode, itemsN, itemsBlockSize); err != nil {
			return nil, err
		}
		if r.itemsRaw[mode], err = bench.RawItemCommits(ctx, client, pool, "bench", "raw-items", mode, itemsN, itemsBlockSize); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// blockWindow runs one window of a block scenario (mode blocks or rawblocks) on a fresh database:
// the blocks completed, and the fraction of the machine's CPU busy meanwhile.
func (e *environment) blockWindow(ctx context.Context, mode string, per int, d time.Duration) (int64, float64, error) {
	pool, done, err := e.fresh(ctx, 0, nil)
	if err != nil {
		return 0, 0, err
	}
	defer done()
	start := time.Now().Add(3 * time.Second)
	busy := machineBusy(start, d)
	results, err := children(ctx, blocksProcs, pool.Config().ConnString(), "-child", mode,
		"-goroutines", fmt.Sprint(blocksGoroutines), "-limit", fmt.Sprint(blocksProcs*blocksGoroutines), "-isolation", "read committed",
		"-child-holders", fmt.Sprint(per), "-start-at", fmt.Sprint(start.UnixNano()), "-child-duration", d.String())
	if err != nil {
		return 0, 0, err
	}
	var n int64
	for _, c := range results {
		n += c.Cycles
	}
	return n, <-busy, nil
}

func (r *blocksResult) print() {
	fmt.Printf("Blocks (%d alternating windows of %s per mode):\n", r.rounds, r.d)
	secs := r.d.Seconds() * float64(r.rounds)
	for _, per := range blocksPer {
		fmt.Printf("  blocks taken, started and completed, %d processes × %d goroutines, %d blocks per execution: %.0f blocks/s vs %.0f raw: %.2f× (target ≥ 0.5×; windows %.2f–%.2f×)\n",
			blocksProcs, blocksGoroutines, per, float64(r.blocks[per])/secs, float64(r.raw[per])/secs, float64(r.blocks[per])/float64(max(1, r.raw[per])),
			slices.Min(r.ratios[per]), slices.Max(r.ratios[per]))
		if r.blocksBusy[per] > 0 {
			cpuMS := func(busy float64, blocks int64) float64 {
				return busy * secs * 1000 * float64(runtime.NumCPU()) / float64(max(1, blocks))
			}
			fmt.Printf("    machine CPU busy %.0f %% vs %.0f %% raw: %.3f ms of CPU per block vs %.3f ms (every process, every core)\n",
				100*r.blocksBusy[per], 100*r.rawBusy[per], cpuMS(r.blocksBusy[per], r.blocks[per]), cpuMS(r.rawBusy[per], r.raw[per]))
		}
	}
	for _, mode := range []taskling.CommitMode{taskling.CommitEachItem, taskling.CommitPeriodically, taskling.CommitAtEnd} {
		target := ""
		if mode != taskling.CommitEachItem {
			target = "; target ≥ 20 000 items/s"
		}
		fmt.Printf("  list items committed %-10s: %6.0f items/s vs %6.0f raw: %.2f×%s\n", r.modeNames[mode], r.items[mode], r.itemsRaw[mode],
			r.items[mode]/r.itemsRaw[mode], target)
	}
}

// machineBusy sends the fraction of the machine's CPU busy between start and start+d (0 without
// /proc/stat).
func machineBusy(start time.Time, d time.Duration) <-chan float64 {
	out := make(chan float64, 1)
	go func() {
		time.Sleep(time.Until(start))
		before := bench.ReadCPU()
		time.Sleep(d)
		out <- bench.ReadCPU().BusySince(before)
	}()
	return out
}
