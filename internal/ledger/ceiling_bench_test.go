package ledger_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/testenv"
)

// BenchmarkSyncWriteCeiling measures what the ledger stream itself can
// take with fsync on every write (testenv.WithSyncAlways), with nothing
// else running: writes of a lane revision's size, one at a time as a
// lane commits today, and pipelined (2 and 4 in flight), which is the only
// way a lane's commits could overlap. It bounds any committer design: a
// lane can never commit faster than this.
//
// A pipelined write cannot name its predecessor's sequence by a
// per-subject check (the predecessor's sequence is not known yet), so it
// uses the two stream-wide expectations, Nats-Expected-Last-Sequence (the
// predicted one) and Nats-Expected-Last-Msg-Id (the predecessor's id):
// together they hold only if the stream's last message is the
// predecessor, at the predicted sequence. Every write here must be
// accepted, so the benchmark also shows the server keeps pipelined writes
// in order; any other write to the stream in between (another lane's, a
// budget's) would fail every write in flight behind it.
//
// Sizes: 200 B (a lone caller's revision) and 19,000 B (a hot64 group of
// about 29 transactions at about 650 B each).
//
//	go test -run '^$' -bench BenchmarkSyncWriteCeiling -benchtime 3000x ./internal/ledger/
func BenchmarkSyncWriteCeiling(b *testing.B) {
	for _, size := range []int{200, 19000} {
		for _, inflight := range []int{1, 2, 4} {
			b.Run("bytes="+strconv.Itoa(size)+"/inflight="+strconv.Itoa(inflight), func(b *testing.B) {
				benchSyncWrites(b, size, inflight)
			})
		}
		// The same lone lane with both of the machine's cores kept busy by
		// other processes, as the bench's callers keep them.
		b.Run("bytes="+strconv.Itoa(size)+"/inflight=1/busy=2", func(b *testing.B) {
			spin(b, 2)
			benchSyncWrites(b, size, 1)
		})
	}
	// The hot64 group split in two over two streams of one server, each
	// written one at a time, in parallel: what a budget split over lanes
	// in streams of their own would ask of the server.
	b.Run("bytes=19000/streams=2", func(b *testing.B) {
		benchParallelStreams(b, 19000, 2)
	})
}

// benchParallelStreams writes size bytes per round, split evenly over n
// streams of their own, one write at a time on each, the streams in
// parallel. writes/s counts every stream's writes.
func benchParallelStreams(b *testing.B, size, n int) {
	env := testenv.New(b, testenv.WithSyncAlways())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range n {
		_, err := env.JS.CreateStream(ctx, jetstream.StreamConfig{
			Name:     "BENCH" + strconv.Itoa(i),
			Subjects: []string{"bench" + strconv.Itoa(i) + ".>"},
			Storage:  jetstream.FileStorage,
		})
		require.NoError(b, err)
	}
	data := make([]byte, size/n)
	errs := make(chan error, n)
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := range n {
		go func() {
			subject := "bench" + strconv.Itoa(i) + ".lane"
			for range b.N {
				if _, err := env.JS.Publish(ctx, subject, data); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range n {
		require.NoError(b, <-errs)
	}
	b.StopTimer()
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "writes/s")
}

// BenchmarkFsyncFloor is what the kernel alone charges for the write under
// BenchmarkSyncWriteCeiling: append a revision's bytes to a file and fsync
// it (as the server's message block does with sync_always), idle and with
// both cores kept busy by other processes. The journal's commit runs in a
// kernel thread that competes for the cores with everything else, so a
// busy machine pays for each fsync in wall time what an idle one does not.
//
//	go test -run '^$' -bench 'BenchmarkFsyncFloor|BenchmarkSyncWriteCeiling/.*/inflight=1' -benchtime 3000x ./internal/ledger/
func BenchmarkFsyncFloor(b *testing.B) {
	for _, size := range []int{200, 19000} {
		for _, busy := range []int{0, 2} {
			b.Run("bytes="+strconv.Itoa(size)+"/busy="+strconv.Itoa(busy), func(b *testing.B) {
				spin(b, busy)
				f, err := os.Create(b.TempDir() + "/block")
				require.NoError(b, err)
				defer f.Close()
				data := make([]byte, size)
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					_, err := f.Write(data)
					require.NoError(b, err)
					require.NoError(b, f.Sync())
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			})
		}
	}
}

// spin keeps n processes busy on the CPU until the benchmark ends: shell
// loops, so that they compete with the benchmark as other processes do (at
// the kernel's scheduler), not as goroutines of this one (at Go's).
func spin(b *testing.B, n int) {
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		require.NoError(b, cmd.Start())
		b.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

func benchSyncWrites(b *testing.B, size, inflight int) {
	env := testenv.New(b, testenv.WithSyncAlways())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stream, err := env.JS.Stream(ctx, env.Layout.StreamName())
	require.NoError(b, err)
	info, err := stream.Info(ctx)
	require.NoError(b, err)
	last, lastID := info.State.LastSeq, ""
	subject := env.Layout.Subject("lane.bench")
	data := make([]byte, size)
	var flight []jetstream.PubAckFuture
	wait := func(f jetstream.PubAckFuture) {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatalf("a pipelined write was refused: %v", err)
		case <-ctx.Done():
			b.Fatal("no acknowledgement")
		}
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(flight) == inflight {
			wait(flight[0])
			flight = flight[1:]
		}
		id := "w" + strconv.Itoa(i)
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Header.Set(jetstream.ExpectedLastSeqHeader, strconv.FormatUint(last, 10))
		if lastID != "" {
			m.Header.Set(jetstream.ExpectedLastMsgIDHeader, lastID)
		}
		f, err := env.JS.PublishMsgAsync(m)
		require.NoError(b, err)
		flight = append(flight, f)
		last, lastID = last+1, id
	}
	for _, f := range flight {
		wait(f)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
	info, err = stream.Info(ctx)
	require.NoError(b, err)
	require.Equal(b, last, info.State.LastSeq, "every write landed, in order")
}
