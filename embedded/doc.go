// Package embedded runs a NATS server with JetStream inside this process:
// the server `spendgate serve`, `spendgate bench` and `spendgate demo`
// embed, and the one package testenv builds its test servers on (the way
// net/http/httptest stands on net/http).
//
//	s, err := embedded.Start("./spendgate-data", embedded.WithListen("127.0.0.1:4222"))
//	if err != nil { ... }          // names the cause: address in use, data dir in use, permission denied
//	defer s.Shutdown()             // stops the server and releases the data dir
//	nc, err := s.Connect()         // an in-process client connection, no TCP
//
// Start does four things, in order, and fails fast with the cause:
//
//   - It locks the data dir: an exclusive flock(2) on the file LockFile in
//     it, holding the owner's process id. A second server on the same data
//     dir, in this process or another, is refused at once with
//     ErrDataDirInUse and the holder's pid. Two servers on one store would
//     each acknowledge writes the other overwrites.
//   - It checks that the client (and cluster) addresses can be bound, so a
//     port in use is reported as such rather than as a timeout.
//   - It starts the server with its log routed to a *slog.Logger
//     (WithLogger; discarded by default) and watches that log for the
//     server's fatal errors (JetStream cannot start, a listener fails).
//   - It waits, bounded by WithReadyTimeout, until the server accepts
//     connections and, for a single server, until a JetStream request
//     succeeds. A cluster node's JetStream cannot be ready before its
//     peers run: call WaitJetStream once they do.
//
// The lock uses flock(2), so it needs a unix system; elsewhere Start
// refuses to run rather than run unlocked.
package embedded
