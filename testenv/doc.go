// Package testenv is spendgate's httptest: it starts real, in-process
// JetStream servers for tests, on top of package embedded (as
// net/http/httptest stands on net/http). No production binary links it.
//
// New starts one server on 127.0.0.1 with a random port and t.TempDir()
// storage, waits until JetStream is ready, applies streams.Ensure and
// cleans everything up with t.Cleanup. Env.Restart restarts that server on
// the same port and store, so tests can check what survives a restart.
// NewCluster starts an n-node cluster (3 is typical) with the ledger stream
// replicated on every node, for failover tests. StartServer is a
// testing-free shortcut to embedded.Start for examples.
package testenv
