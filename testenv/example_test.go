package testenv_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/testenv"
)

func ExampleStartServer() {
	dir, err := os.MkdirTemp("", "testenv-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	// Port 0 picks a random free port.
	s, err := testenv.StartServer(testenv.ServerConfig{StoreDir: dir, NoLog: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.WaitForShutdown()
	defer s.Shutdown()

	nc, err := nats.Connect(s.ClientURL())
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
	// Output: jetstream ready
}
