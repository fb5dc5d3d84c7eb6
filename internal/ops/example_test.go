package ops_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/spendgate/spendgate/internal/metrics"
	"github.com/spendgate/spendgate/internal/ops"
)

func Example() {
	m := metrics.New(metrics.BuildInfo{Version: "dev"})
	srv, err := ops.New("127.0.0.1:0", m.Handler())
	if err != nil {
		panic(err)
	}
	var folded atomic.Bool // in serve: closed ledger Ready channel
	srv.AddCheck("fold", func() error {
		if !folded.Load() {
			return errors.New("folding the ledger stream")
		}
		return nil
	})
	if err := srv.Listen(); err != nil { // fails early: "address already in use"
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- srv.Run(ctx) }()

	show := func() {
		resp, err := http.Get("http://" + srv.Addr() + "/readyz")
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Print(resp.StatusCode, " ", string(body))
	}
	show()
	folded.Store(true)
	show()

	cancel()
	fmt.Println("run:", <-done)
	// Output:
	// 503 {"ready":false,"checks":{"fold":"folding the ledger stream"}}
	// 200 {"ready":true,"checks":{"fold":"ok"}}
	// run: <nil>
}
