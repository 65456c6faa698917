package pgcluster

import "syscall"

// ServerCredential is the OS identity the cluster's server runs as: nil (ourselves) unless we
// are root, then the postgres OS user. Other servers of the tests that refuse to run as root
// (pgbouncer) run as it too.
func ServerCredential() (*syscall.Credential, error) { return serverCredential() }
