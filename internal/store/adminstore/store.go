package adminstore

import "github.com/taskling-go/taskling/execution"

// Store runs the package's statements on the grant protocol's pool.
type Store struct {
	db    execution.DB
	proto *execution.Store
	rates rateSupport
}

// New returns a Store on the protocol store's pool.
func New(proto *execution.Store) *Store { return &Store{db: proto.DB(), proto: proto} }
