// Package historystore is the storage of executions' history: the executions of a task, one
// execution with its events, the events a running execution records (checkpoints, errors,
// progress), and a task's slot timeline. It reads what the grant protocol (package execution)
// writes and writes nothing the protocol reads. Not a stable API.
package historystore

import "github.com/taskling-go/taskling/execution"

// Store runs the history's statements.
type Store struct {
	db execution.DB
}

// New returns a Store on the protocol store's pool.
func New(db execution.DB) *Store { return &Store{db: db} }
