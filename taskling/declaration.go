package taskling

import (
	"context"

	"go.uber.org/zap"

	"github.com/taskling-go/taskling/execution"
)

// noteDeclaration records the settings this host declares for a task — keep settings, enabled,
// liveness — when they differ from what it last recorded: whichever host cleans the task applies
// the keep settings, and operators' tools check overrides against the rest and show where the
// task's enabled state comes from. A start records it before asking for its slot, so that a start
// refused for its settings is explained too; that costs one round trip per task and declaration
// in a process's life. A failure is only logged: the next start records it again.
func (c *Client) noteDeclaration(ctx context.Context, req startReq) {
	d := req.Declared
	if last, ok := c.declarations.Load(req.TaskID); ok && last.(execution.Settings).Equal(d) {
		return
	}
	if err := c.admin.Declare(ctx, req.TaskID, d, c.host); err != nil {
		c.log.Debug("taskling: could not record the task's declared settings", zap.String("task", req.TaskName), zap.Error(err))
		return
	}
	c.declarations.Store(req.TaskID, d)
}
