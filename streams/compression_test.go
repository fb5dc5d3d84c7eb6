package streams_test

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

// BenchmarkDiskBytesPerReservation measures the ledger stream's bytes on
// disk per reservation (admit + settle): 64 callers, 200 budgets, every
// fifth admit over two scopes. "default" is the stream as Ensure creates
// it (uncompressed); "s2" is the S2-compressed stream that earlier
// builds created, for comparison. Run it with
//
//	go test -run '^$' -bench BenchmarkDiskBytesPerReservation -benchtime 1x ./streams/
func BenchmarkDiskBytesPerReservation(b *testing.B) {
	for _, tc := range []struct {
		name        string
		compression jetstream.StoreCompression
	}{
		{"default", streams.Compression},
		{"s2", jetstream.S2Compression},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				const n = 40_000
				env := testenv.New(b)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				s, err := env.JS.Stream(ctx, env.Layout.StreamName())
				require.NoError(b, err)
				if tc.compression != s.CachedInfo().Config.Compression {
					cfg := s.CachedInfo().Config
					require.NoError(b, env.JS.DeleteStream(ctx, cfg.Name))
					cfg.Compression = tc.compression
					s, err = env.JS.CreateStream(ctx, cfg)
					require.NoError(b, err)
				}
				r := replicatest.Start(b, env, replica.Config{SweepInterval: -1})
				for j := 0; j < 200; j++ {
					for _, kind := range []string{"org", "team"} {
						_, err := r.Ledger.PutBudget(ctx, events.BudgetRef{Scope: events.Scope(fmt.Sprintf("%s:d%d", kind, j)), Period: events.PeriodMonth},
							events.MustMoney("1000000"), "USD", time.Now())
						require.NoError(b, err)
					}
				}
				var next atomic.Int64
				var failed atomic.Value
				var wg sync.WaitGroup
				for c := 0; c < 64; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							k := int(next.Add(1) - 1)
							if k >= n {
								return
							}
							scopes := []string{fmt.Sprintf("org:d%d", k%200)}
							if k%5 == 0 {
								scopes = append(scopes, fmt.Sprintf("team:d%d", k%200))
							}
							rep, err := r.Admitter.Admit(ctx, events.AdmitRequest{RequestID: fmt.Sprintf("req-%d", k), Scopes: scopes, Amount: "0.25"})
							if err == nil {
								_, err = r.Settler.Settle(ctx, events.SettleRequest{ReservationID: rep.ReservationID, Actual: "0.2"})
							}
							if err != nil {
								failed.Store(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				info, err := s.Info(ctx)
				require.NoError(b, err)
				var disk int64
				require.NoError(b, filepath.WalkDir(env.StoreDir, func(p string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() && strings.Contains(p, env.Layout.StreamName()) && strings.HasSuffix(p, ".blk") {
						fi, err := d.Info()
						if err == nil {
							disk += fi.Size()
						}
					}
					return nil
				}))
				if testing.Verbose() {
					_ = filepath.WalkDir(env.StoreDir, func(p string, d fs.DirEntry, err error) error {
						if err == nil && !d.IsDir() {
							fi, _ := d.Info()
							b.Logf("%s %d", p, fi.Size())
						}
						return nil
					})
				}
				b.ReportMetric(float64(disk)/n, "disk-B/reservation")
				b.ReportMetric(float64(info.State.Bytes)/n, "stream-B/reservation")
				b.ReportMetric(float64(info.State.Msgs), "msgs")
			}
		})
	}
}
