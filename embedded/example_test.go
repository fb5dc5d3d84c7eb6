package embedded_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/embedded"
)

func ExampleStart() {
	dir, err := os.MkdirTemp("", "embedded-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	// Port 0 picks a random free port.
	s, err := embedded.Start(dir, embedded.WithListen("127.0.0.1:0"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Shutdown()

	// A second server on the same data dir is refused.
	if _, err := embedded.Start(dir); err != nil {
		fmt.Println("second start refused")
	}

	nc, err := s.Connect()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("jetstream ready")
	// Output:
	// second start refused
	// jetstream ready
}
