// Package ops is spendgate's operator HTTP port: one listener for
// Prometheus metrics (/metrics), liveness (/healthz), readiness (/readyz)
// and whatever else the operator should reach over HTTP (the dashboard
// mounts itself with Server.Handle).
//
//	srv, err := ops.New(":9090", m.Handler(), ops.WithLogger(log))
//	srv.AddCheck("fold", func() error { ... nil once the book is folded ... })
//	srv.AddCheck("nats", func() error { ... nil while connected ... })
//	if err := srv.Listen(); err != nil { ... "address already in use" ... }
//	go srv.Run(ctx) // serves until ctx ends, then shuts down gracefully
//
// /healthz answers 200 while the process can serve HTTP at all: it says
// nothing about NATS, so an orchestrator does not restart a replica that is
// only waiting for its cluster. /readyz answers 200 only when every check
// passes, else 503 with a JSON body naming each failing check and why, so a
// load balancer or a rolling update waits for the replica's fold.
package ops
