package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/taskling-go/taskling/taskling"
)

// The dashboard's pages of blocks: the task page's blocks at their retry limit, an execution's
// page with the blocks it attempted, and a block's page with its attempts. Forcing a block goes
// through the JSON API (POST /api/v1/blocks/{id}/force) from the dashboard's script, like the
// Cancel buttons of submissions: the session cookie plus the X-Taskling-Request header.

// blocksOnTaskPage is how many blocks the task page reads: of those at their retry limit, and of
// the newest ones for the counts by status.
const blocksOnTaskPage = 100

// blockRow is a block as a page shows it.
type blockRow struct {
	taskling.BlockInfo
	Force bool // this browser may force it: show the button
}

// blockCount is how many of the blocks counted are in one status.
type blockCount struct {
	Status taskling.BlockStatus
	Blocks int
}

// taskBlocks is what the task page shows of a task's blocks.
type taskBlocks struct {
	// Any: the task has blocks, so the page has the section.
	Any     bool
	AtLimit []blockRow
	// Counts are of the newest blocks (Counted of them, all the task's unless Capped), by status.
	Counts  []blockCount
	Counted int
	Capped  bool
}

// blockStatusOrder is the order the counts by status are shown in.
var blockStatusOrder = []taskling.BlockStatus{taskling.BlockNotStarted, taskling.BlockStarted, taskling.BlockCompleted, taskling.BlockFailed, taskling.BlockDead}

// canForce reports whether the page offers to force blocks: the browser may make changes. Any
// block can be forced; one already forced shows that instead of the button.
func canForce(p page, b taskling.BlockInfo) bool {
	return p.MayChange && !b.ForcePending
}

func (h *Handler) loadTaskBlocks(r *http.Request, p page, app, task string) (taskBlocks, error) {
	var tb taskBlocks
	atLimit, err := h.client.TaskBlocks(r.Context(), app, task, &taskling.TaskBlocksFilter{AtRetryLimit: true, Limit: blocksOnTaskPage})
	if err != nil {
		return tb, err
	}
	recent, err := h.client.TaskBlocks(r.Context(), app, task, &taskling.TaskBlocksFilter{Limit: blocksOnTaskPage})
	if err != nil {
		return tb, err
	}
	tb.Any = len(atLimit) > 0 || len(recent) > 0
	for _, b := range atLimit {
		tb.AtLimit = append(tb.AtLimit, blockRow{BlockInfo: b, Force: canForce(p, b)})
	}
	n := map[taskling.BlockStatus]int{}
	for _, b := range recent {
		n[b.Status]++
	}
	for _, s := range blockStatusOrder {
		if n[s] > 0 {
			tb.Counts = append(tb.Counts, blockCount{Status: s, Blocks: n[s]})
		}
	}
	tb.Counted, tb.Capped = len(recent), len(recent) == blocksOnTaskPage
	return tb, nil
}

// executionPageData is the execution page's data.
type executionPageData struct {
	Execution
	Application, Task string
	Blocks            []taskling.BlockInfo
}

func (h *Handler) executionPage(w http.ResponseWriter, r *http.Request) {
	id, ok := pageID(w, r, "execution")
	if !ok {
		return
	}
	d, err := h.client.Execution(r.Context(), id)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	blocks, err := h.client.ExecutionBlocks(r.Context(), id)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	p := h.basePage(r, fmt.Sprintf("Execution #%d", id))
	p.Data = executionPageData{Execution: NewExecution(d.ExecutionInfo, d.Events), Application: d.Application, Task: d.Task, Blocks: blocks}
	h.render(w, r, http.StatusOK, "execution", p)
}

// blockPageData is the block page's data.
type blockPageData struct {
	BlockDetail
	// Application and Task name the block's task ("" if its execution is gone).
	Application, Task string
	Force             bool
}

func (h *Handler) blockPage(w http.ResponseWriter, r *http.Request) {
	id, ok := pageID(w, r, "block")
	if !ok {
		return
	}
	d, err := LoadBlock(r, h.client, id)
	if err != nil {
		h.pageError(w, r, err)
		return
	}
	p := h.basePage(r, fmt.Sprintf("Block #%d", id))
	data := blockPageData{BlockDetail: d, Force: canForce(p, d.BlockInfo)}
	// A block names its task by id: its latest attempt's execution names it.
	if x, err := h.client.Execution(r.Context(), d.ExecutionID); err == nil {
		data.Application, data.Task = x.Application, x.Task
	} else if !isNotFound(err) {
		h.pageError(w, r, err)
		return
	}
	p.Data = data
	h.render(w, r, http.StatusOK, "block", p)
}

// pageID reads a page's {id} path segment, or answers 400; what names the kind of id.
func pageID(w http.ResponseWriter, r *http.Request, what string) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		http.Error(w, fmt.Sprintf("%s id %q is not a positive integer", what, r.PathValue("id")), http.StatusBadRequest)
		return 0, false
	}
	return id, true
}

// blockSpan is what a block covers: its numbers, its time span, its item count or its value
// (shortened to max runes; 0: whole).
func blockSpan(b taskling.BlockInfo, max int) string {
	switch {
	case b.FromNumber != nil && b.ToNumber != nil:
		return fmt.Sprintf("%d–%d", *b.FromNumber, *b.ToNumber)
	case b.FromTime != nil && b.ToTime != nil:
		return clock(*b.FromTime) + " – " + clock(*b.ToTime)
	case b.Kind == "list":
		if b.ItemCount == 1 {
			return "1 item"
		}
		return fmt.Sprintf("%d items", b.ItemCount)
	case b.ValueError != "":
		return "(unreadable)"
	}
	return shorten(string(b.Value), max)
}

// shorten cuts s to max runes, ending with "…" when cut; max 0 keeps it whole.
func shorten(s string, max int) string {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return s
	}
	n := 0
	for i := range s {
		if n == max-1 {
			return s[:i] + "…"
		}
		n++
	}
	return s
}
