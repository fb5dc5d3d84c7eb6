package events_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/spendgate/spendgate/events"
)

func BenchmarkParseMoney(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.ParseMoney("12345.000000001"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMoneyAdd(b *testing.B) {
	x, y := events.MustMoney("12345.67"), events.MustMoney("0.000000001")
	b.ReportAllocs()
	for b.Loop() {
		x = x.Add(y)
	}
	_ = x
}

func BenchmarkEncodeEventOpened(b *testing.B) {
	e := goldenEvents()[1]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.EncodeEvent(e); err != nil {
			b.Fatal(err)
		}
	}
}

// groupCommitRevision is a balance revision as a group commit writes it: 32
// reservations opened in one write.
func groupCommitRevision() events.BalanceRevision {
	rev := goldenBalanceRevision()
	rev.Events = make(events.Events, 0, 32)
	for i := range 32 {
		o := goldenEvents()[1].(events.ReservationOpened)
		o.ReservationID = fmt.Sprintf("rsv_%026d", i)
		o.RequestID = fmt.Sprintf("req-%d", i)
		o.At = o.At.Add(time.Duration(i) * time.Millisecond)
		o.ExpiresAt = o.At.Add(events.DefaultTTL)
		rev.Events = append(rev.Events, o)
	}
	rev.Open = 32
	return rev
}

func BenchmarkEncodeBalanceRevision(b *testing.B) {
	rev := groupCommitRevision()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(rev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeBalanceRevision(b *testing.B) {
	data, err := json.Marshal(groupCommitRevision())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var rev events.BalanceRevision
		if err := json.Unmarshal(data, &rev); err != nil {
			b.Fatal(err)
		}
		if len(rev.Events) != 32 {
			b.Fatalf("decoded %d events", len(rev.Events))
		}
	}
}
