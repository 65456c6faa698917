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
	// Position in the task's queue of waiting submissions (1 = next); 0 unless waiting.
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
}
