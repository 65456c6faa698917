package httpapi

import (
	"net/http"
	"strconv"

	"github.com/taskling-go/taskling/taskling"
)

// BlockList is the answer of the block listings.
type BlockList struct {
	Blocks []taskling.BlockInfo `json:"blocks"`
}

// BlockDetail is one block with its attempts, first first.
type BlockDetail struct {
	taskling.BlockInfo
	AttemptList []taskling.BlockAttemptInfo `json:"attempt_list"`
}

// ForceRequest is the optional body of POST /api/v1/blocks/{id}/force.
type ForceRequest struct {
	// ForcedBy is a note recorded beside the principal that forces the block (its by).
	ForcedBy string `json:"forced_by"`
}

func (h *Handler) executionBlocks(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "execution")
	if !ok {
		return
	}
	if _, err := h.client.Execution(r.Context(), id); err != nil {
		h.fail(w, r, err)
		return
	}
	blocks, err := h.client.ExecutionBlocks(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, BlockList{Blocks: nonNil(blocks)})
}

func (h *Handler) taskBlocks(w http.ResponseWriter, r *http.Request) {
	app, task, field, err := taskName(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	var f taskling.TaskBlocksFilter
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "limit", "limit "+strconv.Quote(v)+" is not a non-negative integer")
			return
		}
		f.Limit = n
	}
	if v := r.URL.Query().Get("at_retry_limit"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "at_retry_limit", "at_retry_limit "+strconv.Quote(v)+" is not true or false")
			return
		}
		f.AtRetryLimit = b
	}
	if f.Limit > 1000 {
		writeError(w, http.StatusBadRequest, "limit", "limit is "+strconv.Itoa(f.Limit)+"; at most 1000")
		return
	}
	blocks, err := h.client.TaskBlocks(r.Context(), app, task, &f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, BlockList{Blocks: nonNil(blocks)})
}

func (h *Handler) getBlock(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "block")
	if !ok {
		return
	}
	d, err := LoadBlock(r, h.client, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (h *Handler) forceBlock(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "block")
	if !ok {
		return
	}
	var req ForceRequest
	if !decodeBody(w, r, &req, bodySpec{what: "force options", unknown: "force option", limit: 16 << 10, emptyOK: true}) {
		return
	}
	if err := checkBy("forced_by", req.ForcedBy); err != nil {
		badField(w, err)
		return
	}
	if err := h.as(r, req.ForcedBy).ForceBlock(r.Context(), id); err != nil {
		h.fail(w, r, err)
		return
	}
	d, err := LoadBlock(r, h.client, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// LoadBlock reads a block with its attempts.
func LoadBlock(r *http.Request, c *taskling.Client, id int64) (BlockDetail, error) {
	b, err := c.Block(r.Context(), id)
	if err != nil {
		return BlockDetail{}, err
	}
	attempts, err := c.BlockAttempts(r.Context(), id)
	if err != nil {
		return BlockDetail{}, err
	}
	return BlockDetail{BlockInfo: b, AttemptList: attempts}, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
