package tasklingtype

import (
	"encoding/json"
	"time"
)

// SubmissionStatus is where a submission stands.
type SubmissionStatus string

const (
	// SubmissionWaiting: waiting for a worker and a slot (also between attempts).
	SubmissionWaiting SubmissionStatus = "waiting"
	// SubmissionInProgress: an attempt runs.
	SubmissionInProgress SubmissionStatus = "in_progress"
	// SubmissionCompleted: an attempt completed. It is never run again.
	SubmissionCompleted SubmissionStatus = "completed"
	// SubmissionDead: its attempts are spent (each failed, or its worker died).
	SubmissionDead SubmissionStatus = "dead"
	// SubmissionCancelled: an operator cancelled it.
	SubmissionCancelled SubmissionStatus = "cancelled"
)

// Submission is a submitted run and where it stands.
type Submission struct {
	ID          int64            `json:"id"`
	Application string           `json:"application"`
	Task        string           `json:"task"`
	Status      SubmissionStatus `json:"status"`
	// Position among the task's waiting submissions by priority, then age (1 = first); 0 unless
	// waiting. With keys, Work takes turns across keys, so the first is not always the next
	// claimed.
	Position int `json:"position"`
	Priority int `json:"priority"`
	// Key and Cost are the submission's (SubmitOptions): "" is no key.
	Key            string          `json:"key,omitempty"`
	Cost           int             `json:"cost"`
	ReferenceValue string          `json:"reference_value,omitempty"`
	Header         json.RawMessage `json:"header,omitempty"`
	// HeaderError says why Header is nil although the submission has one: encoding/json cannot
	// read the stored value (nested deeper than 10 000, written with SQL).
	HeaderError string `json:"header_error,omitempty"`
	Attempts    int    `json:"attempts"`
	MaxAttempts int    `json:"max_attempts"`
	// ExecutionID is the execution of the current or last attempt (0: none yet); ItemsDone and
	// ItemsTotal are its progress (Execution.SetProgress).
	ExecutionID     int64      `json:"execution_id,omitempty"`
	ItemsDone       int64      `json:"items_done"`
	ItemsTotal      int64      `json:"items_total"`
	LastError       string     `json:"last_error,omitempty"`
	CancelRequested bool       `json:"cancel_requested"`
	CancelReason    string     `json:"cancel_reason,omitempty"`
	SubmittedAt     time.Time  `json:"submitted_at"`
	UpdatedAt       time.Time  `json:"updated_at"`
	FinishedAt      *time.Time `json:"finished_at,omitempty"`
	// Trace is the trace context of the code that submitted it (SubmitOptions.TraceContext, or
	// what a hook read from Submit's context); zero when none was given.
	Trace TraceContext `json:"trace,omitzero"`
}

// TraceContext is a W3C trace context (https://www.w3.org/TR/trace-context/): the values of the
// traceparent and tracestate headers, as stored with a submission.
type TraceContext struct {
	// Traceparent is "version-traceid-parentid-flags", e.g.
	// "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".
	Traceparent string `json:"traceparent"`
	// Tracestate is vendor data that travels with it ("" for none).
	Tracestate string `json:"tracestate,omitempty"`
}

// IsZero reports whether there is no trace context.
func (t TraceContext) IsZero() bool { return t.Traceparent == "" && t.Tracestate == "" }

// SubmissionCount is how many submissions of a task have a status.
type SubmissionCount struct {
	Application string           `json:"application"`
	Task        string           `json:"task"`
	Status      SubmissionStatus `json:"status"`
	Submissions int64            `json:"submissions"`
}
