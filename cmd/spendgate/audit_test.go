package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/replicatest"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/testenv"
)

// failingWriter accepts limit bytes, then fails every write.
type failingWriter struct{ limit int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) > f.limit {
		n := f.limit
		f.limit = 0
		return n, io.ErrShortWrite
	}
	f.limit -= len(p)
	return len(p), nil
}

func TestWriteBalances_WriteErrors(t *testing.T) {
	t.Parallel()
	balances := make([]projector.Balance, 1000)
	for i := range balances {
		balances[i] = projector.Balance{Unit: "USD", Limit: events.MustMoney("1"), Spent: events.MustMoney("0.5"),
			Reserved: events.MustMoney("0"), Overrun: events.MustMoney("0")}
	}
	var whole bytes.Buffer
	require.NoError(t, writeBalances(&whole, balances, nil, report.DecimalPoint))
	require.Equal(t, len(balances)+1, strings.Count(whole.String(), "\n"))
	// Cut short anywhere: in the header, in the rows, at the final flush.
	for _, limit := range []int{0, 10, 5000, whole.Len() - 1} {
		require.ErrorIs(t, writeBalances(&failingWriter{limit: limit}, balances, nil, report.DecimalPoint), io.ErrShortWrite, "limit %d", limit)
	}
}

// --decimal comma: the balances' decimals with a comma, the fields split
// by semicolons, the rest as it is; and a report whose group column is
// named like a decimal column (--by metadata.reserved) keeps its values.
func TestCSV_DecimalComma(t *testing.T) {
	t.Parallel()
	b := projector.Balance{Ref: events.BalanceRef{Scope: "team:a.b", Period: "month", Instance: "2026-12"}, Unit: "USD",
		Limit: events.MustMoney("10.25"), Spent: events.MustMoney("0.5"), Reserved: events.MustMoney("1"), Overrun: events.MustMoney("0")}
	var out bytes.Buffer
	retired := b
	retired.Ref.Scope = "run:r1"
	at := map[events.BudgetRef]time.Time{retired.Ref.Budget(): time.Date(2026, 12, 6, 9, 30, 0, 0, time.UTC)}
	require.NoError(t, writeBalances(&out, []projector.Balance{retired, b}, at, report.DecimalComma))
	require.Equal(t, "scope;period;instance;unit;limit;spent;reserved;overrun;open;opened;settled;released;expired;late;tz;retired_at\n"+
		"run:r1;month;2026-12;USD;10,25;0,5;1;0;0;0;0;0;0;0;;2026-12-06T09:30:00Z\n"+
		"team:a.b;month;2026-12;USD;10,25;0,5;1;0;0;0;0;0;0;0;;\n", out.String())

	rep := &report.SpendReport{Groups: []report.SpendGroup{{Value: "1.5", Unit: "USD", Spend: events.MustMoney("2.75"),
		Overrun: events.MustMoney("0"), Reserved: events.MustMoney("0.125")}}}
	out.Reset()
	require.NoError(t, writeReportCSV(&out, "reserved", rep, report.DecimalComma))
	require.Equal(t, "reserved;unit;reservations;open;settled;released;expired;late;spend;overrun;reserved;denials\n"+
		"1.5;USD;0;0;0;0;0;0;2,75;0;0,125;0\n", out.String())
}

// A finance export to a full disk exits non-zero: a truncated file is
// never reported as complete.
func TestAuditBalances_FullDevice(t *testing.T) {
	t.Parallel()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	code, _ := e2eCLI(t, env.URL(), "budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "10", "--unit", "USD")
	require.Equal(t, 0, code)
	code, _ = e2eCLI(t, env.URL(), "admit", "--scope", "org:acme", "--amount", "1")
	require.Equal(t, 0, code)

	code, out := e2eCLI(t, env.URL(), "audit", "balances", "--unverified")
	require.Equal(t, 0, code)
	require.Contains(t, string(out), "org:acme,month,")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, clientBin("audit", "balances"), "audit", "balances", "--unverified", "--nats-url", env.URL())
	cmd.Env = append(os.Environ(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = full, &stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	require.True(t, errors.As(err, &exitErr), "exit: %v\n%s", err, stderr.String())
	require.Equal(t, 1, exitErr.ExitCode())
	require.Contains(t, stderr.String(), "the CSV is incomplete")
	require.Contains(t, stderr.String(), "no space left on device")

	// The same for a client command's reply.
	cmd = exec.CommandContext(ctx, clientBin("budget", "list"), "budget", "list", "--nats-url", env.URL())
	cmd.Env = append(os.Environ(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = full, &stderr
	err = cmd.Run()
	require.True(t, errors.As(err, &exitErr), "exit: %v\n%s", err, stderr.String())
	require.Equal(t, 1, exitErr.ExitCode())
	require.Contains(t, stderr.String(), "write the reply")
}

// Every offline tool ends by --within: a deadline too short to read the
// book fails, saying where the read stopped, and a deadline that is not
// positive is a usage error.
func TestOfflineTools_Within(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	replicatest.Start(t, env, replica.Config{SweepInterval: -1})
	code, _ := e2eCLI(t, env.URL(), "budget", "put", "--scope", "org:acme", "--period", "month", "--limit", "10", "--unit", "USD")
	require.Equal(t, 0, code)
	for _, args := range [][]string{
		{"audit", "check", "--unverified"}, {"audit", "export", "--unverified"}, {"audit", "balances", "--unverified"}, {"audit", "keys"},
		{"report", "--replay", "--by", "scope", "--unverified"}, {"audit", "archive", "--dir", t.TempDir()}, {"audit", "trim", "--dir", t.TempDir(), "--unverified"},
	} {
		code, _, stderr := e2eCLIErr(t, env.URL(), append(args, "--within", "0s")...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "--within must be positive", "%v", args)
		code, _, stderr = e2eCLIErr(t, env.URL(), append(args, "--within", "1ns")...)
		require.Equal(t, 1, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "deadline exceeded", "%v", args)
	}
}
