package main

import (
	"context"
	"fmt"
	"time"

	"github.com/taskling-go/taskling/internal/devtools/bench"
	"github.com/taskling-go/taskling/taskling"
)

// blocksPer are the blocks per execution measured: the execution's own start, take and completion
// are shared by fewer or more blocks.
var blocksPer = []int{10, 50}

const (
	blocksProcs      = 4
	blocksGoroutines = 4
	itemsN           = 20000
	itemsBlockSize   = 1000
)

// blocksResult is what the block scenarios measured.
type blocksResult struct {
	d               time.Duration
	blocks, raw     map[int]int64 // by blocks per execution
	items, itemsRaw map[taskling.CommitMode]float64
	modeNames       map[taskling.CommitMode]string
}

func (e *environment) blocks(ctx context.Context, d time.Duration) (*blocksResult, error) {
	r := &blocksResult{d: d, blocks: map[int]int64{}, raw: map[int]int64{}, items: map[taskling.CommitMode]float64{}, itemsRaw: map[taskling.CommitMode]float64{},
		modeNames: map[taskling.CommitMode]string{taskling.CommitEachItem: "each item", taskling.CommitPeriodically: "every 100",
			taskling.CommitAtEnd: "at the end"}}
	for _, per := range blocksPer {
		for _, mode := range []string{"blocks", "rawblocks"} {
			fmt.Printf("blocks: %s, %d processes × %d goroutines, %d blocks per execution, %s…\n", mode, blocksProcs, blocksGoroutines, per, d)
			pool, done, err := e.fresh(ctx, 0, nil)
			if err != nil {
				return nil, err
			}
			results, err := children(ctx, blocksProcs, "-child", mode, "-database-url", pool.Config().ConnString(),
				"-goroutines", fmt.Sprint(blocksGoroutines), "-limit", fmt.Sprint(blocksProcs*blocksGoroutines), "-isolation", "read committed",
				"-child-holders", fmt.Sprint(per), "-start-at", fmt.Sprint(time.Now().Add(3*time.Second).UnixNano()), "-child-duration", d.String())
			done()
			if err != nil {
				return nil, err
			}
			for _, c := range results {
				if mode == "blocks" {
					r.blocks[per] += c.Cycles
				} else {
					r.raw[per] += c.Cycles
				}
			}
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

func (r *blocksResult) print() {
	fmt.Println("Blocks (one run):")
	secs := r.d.Seconds()
	for _, per := range blocksPer {
		fmt.Printf("  blocks taken, started and completed, %d processes × %d goroutines, %d blocks per execution: %.0f blocks/s vs %.0f raw: %.2f× (target ≥ 0.5×)\n",
			blocksProcs, blocksGoroutines, per, float64(r.blocks[per])/secs, float64(r.raw[per])/secs, float64(r.blocks[per])/float64(max(1, r.raw[per])))
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
