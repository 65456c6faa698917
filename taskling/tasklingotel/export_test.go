package tasklingotel

import "github.com/taskling-go/taskling/taskling"

// HooksForTest are hooks that feed t's instruments as the client's do.
func (t *Telemetry) HooksForTest() taskling.Hooks { return t.metrics.hooks() }
