// Command fakellm serves package fakellm's fake provider on an address,
// for the SDK tests of spendgate gateway (.ci/run) and for trying the
// gateway without a provider account.
//
//	fakellm --listen 127.0.0.1:9090 --key sk-upstream
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spendgate/spendgate/internal/fakellm"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on (port 0 picks one; the address is printed)")
	key := flag.String("key", "sk-fake-upstream", "the credential the fake accepts")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, "http://"+ln.Addr().String())
	srv := &http.Server{Handler: fakellm.New(*key), ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}
