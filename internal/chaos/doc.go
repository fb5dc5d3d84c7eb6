// Package chaos is spendgate's cluster fault test: three nats-server
// processes (the nats-server binary of the module's own dependency, built
// by the test), two spendgate replicas as their own processes (built from
// cmd/spendgate), callers that retry every request under the same id, and
// faults injected with SIGKILL and SIGSTOP on the stream leader, the
// JetStream meta leader and a follower, several in a row. Afterwards every
// node's copy of the ledger is read on its own and audited, every
// acknowledged operation must be in it, nothing may be over-admitted, no
// answer may contradict the ledger, and each outage is logged.
//
// The package has no code outside its tests. The short run is part of the
// normal test command; SPENDGATE_CLUSTER_SOAK=1 (or a duration such as
// SPENDGATE_CLUSTER_SOAK=8m) runs the soak. See docs/cluster-faults.md.
package chaos
