// Command node runs one node of a JetStream cluster in its own process, for
// the hard-failover tests of package service (which build it, start three,
// and SIGKILL or SIGSTOP the stream leader's process). It is the embedded
// server of package embedded with clustering, nothing else: it prints
// "ready" once the node accepts client connections, and shuts down cleanly
// on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spendgate/spendgate/embedded"
)

func main() {
	name := flag.String("name", "", "server name")
	dir := flag.String("dir", "", "data dir")
	listen := flag.String("listen", "127.0.0.1:0", "client address")
	cluster := flag.String("cluster", "", "route address")
	routes := flag.String("routes", "", "comma-separated nats-route:// URLs")
	flag.Parse()
	s, err := embedded.Start(*dir, embedded.WithServerName(*name), embedded.WithListen(*listen),
		embedded.WithCluster("c1", *cluster, strings.Split(*routes, ",")...))
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	s.Shutdown()
}
