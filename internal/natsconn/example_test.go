package natsconn_test

import (
	"flag"
	"fmt"

	"github.com/spendgate/spendgate/internal/natsconn"
)

// A command registers the connection flags, parses them and logs what it
// connects with; a secret never shows.
func ExampleOptions_RegisterFlags() {
	var o natsconn.Options
	fs := flag.NewFlagSet("spendgate-audit", flag.ContinueOnError)
	o.RegisterFlags(fs)
	_ = fs.Parse([]string{
		"--nats-url", "tls://n1.example:4222,tls://n2.example:4222",
		"--creds", "/etc/spendgate/finance.creds",
		"--tls-ca", "/etc/spendgate/ca.pem",
	})
	fmt.Println(o.Validate() != nil) // the files do not exist here
	fmt.Println(o.Describe())
	// Then: nc, err := o.Connect("spendgate-audit")
	// Output:
	// true
	// servers=tls://n1.example:4222,tls://n2.example:4222 auth=creds:/etc/spendgate/finance.creds tls=ca:/etc/spendgate/ca.pem
}
