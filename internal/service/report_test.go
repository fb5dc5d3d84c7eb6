package service_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/replica"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/internal/soak"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
)

// traffic drives n admits through the API over several hours of the
// harness clock: two scopes (one multi-scope admit in three), metadata
// with a model and sometimes a user, then settles (some above the
// amount), releases, expiries by the sweeper, settles after expiry, and
// some left open. It returns the reservations still open (open, on
// entry, are ones it may close).
func (h *harness) traffic(rng *rand.Rand, n int, tag string, open []string) []string {
	h.t.Helper()
	models := []string{"gpt-4o", "claude", "mini"}
	for i := range n {
		h.clock.now.Store(h.clock.now.Load().Add(time.Duration(rng.IntN(900)) * time.Second))
		scopes := []string{"org:acme"}
		switch rng.IntN(3) {
		case 0:
			scopes = append(scopes, "user:u-1")
		case 1:
			scopes = []string{"user:u-2"}
		}
		meta := map[string]string{"model": models[rng.IntN(len(models))]}
		if rng.IntN(2) == 0 {
			meta["user"] = fmt.Sprintf("u-%d", rng.IntN(3))
		}
		r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("%s-%d", tag, i), Scopes: scopes,
			Amount: fmt.Sprintf("%d.%02d", rng.IntN(3), 1+rng.IntN(99)), TTL: "1m", Metadata: meta})
		require.Nil(h.t, e)
		require.True(h.t, r.Admitted)
		open = append(open, r.ReservationID)
		if rng.IntN(4) == 0 {
			continue
		}
		k := rng.IntN(len(open))
		id := open[k]
		open = append(open[:k], open[k+1:]...)
		actual := fmt.Sprintf("%d.%03d", rng.IntN(3), rng.IntN(1000))
		switch rng.IntN(4) {
		case 0, 1:
			_, e = h.settle(id, actual)
		case 2:
			_, e = h.release(id)
		case 3:
			// Expire everything due, then maybe settle one of them late.
			h.clock.now.Store(h.clock.now.Load().Add(2 * time.Minute))
			_, err := h.replicas[0].Sweeper.Pass(ctxT(h.t))
			require.NoError(h.t, err)
			open = nil
			if rng.IntN(2) == 0 {
				_, e = h.settle(id, actual)
			}
		}
		require.Nil(h.t, e)
	}
	return open
}

// requireReportsEqual asks every replica's aggregate and the report
// endpoint for every grouping over open bounds and over windows of
// reportTile tiling the hours the harness clock crossed, and requires each
// answer to equal the replay of the book at the same position, to the
// printed digit.
func (h *harness) requireReportsEqual(start time.Time) {
	h.t.Helper()
	p := projector.New(h.env.JS, h.env.Layout)
	h0, h1 := start.Truncate(time.Hour), h.clock.now.Load().Truncate(time.Hour).Add(time.Hour)
	windows := [][2]time.Time{{}, {h0.Add(time.Hour), {}}}
	tile := reportTile
	if soak.Long() {
		tile = 2 * time.Hour
	}
	for t := h0; t.Before(h1); t = t.Add(tile) {
		windows = append(windows, [2]time.Time{t, t.Add(tile)})
	}
	rfc := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Format(time.RFC3339)
	}
	for _, by := range []string{"scope", "model", "user"} {
		g, _, _, err := report.ParseReportRequest(events.ReportRequest{By: by})
		require.NoError(h.t, err)
		for _, w := range windows {
			want, err := report.NewReader(h.env.JS, h.env.Layout, p).Report(ctxT(h.t), report.Filter{From: w[0], To: w[1]}, g)
			require.NoError(h.t, err)
			req := events.ReportRequest{By: by, From: rfc(w[0]), To: rfc(w[1]), Shadow: true}
			var replies []events.ReportReply
			for _, r := range h.replicas {
				rep, err := r.Reports.Report(ctxT(h.t), g, report.Filter{From: w[0], To: w[1]})
				require.NoError(h.t, err)
				replies = append(replies, service.ReportReply(req, rep))
			}
			var api events.ReportReply
			require.Nil(h.t, h.call(streams.EndpointReport, req, &api))
			replies = append(replies, api)
			for _, got := range replies {
				require.Equal(h.t, want.Position, got.Position, "%s %v", by, w)
				require.Len(h.t, got.Groups, len(want.Groups), "%s %v", by, w)
				for i, wg := range want.Groups {
					require.Equal(h.t, events.ReportGroup{Value: wg.Value, Unit: wg.Unit, Reservations: wg.Reservations, Open: wg.Open,
						Settled: wg.Settled, Released: wg.Released, Expired: wg.Expired, Late: wg.Late,
						Spend: wg.Spend.String(), Overrun: wg.Overrun.String(), Reserved: wg.Reserved.String(), Denials: wg.Denials}, got.Groups[i], "%s %v", by, w)
				}
				// The check and shadow decisions, apart from the spend.
				require.Equal(h.t, service.ShadowGroups(want.Shadow), got.Shadow, "shadow %s %v", by, w)
			}
		}
	}
}

// reportTile is the width of the windows requireReportsEqual tiles the
// history with. Each window costs a full replay per grouping (the ledger
// and the denial stream read twice, about four fifths of the report
// tests' CPU), so the tiles are 4 hours wide, not 2: a record the
// aggregate files under the wrong hour changes the window on one side of
// a boundary it crosses, and every boundary has records on both sides
// (traffic steps the clock up to 15 minutes per admit, the denials up to
// 20: 6 to 8 records an hour, so an hour next to a boundary is empty with
// probability about e^-6, 0.25 %, and a 17-hour history has four interior
// boundaries, midnight among them). The open windows still cover every
// record with every grouping. .ci/run's soak step tiles with 2 hours.
const reportTile = 4 * time.Hour

// TestReport_EqualsReplayAcrossRestart: on two replicas, the report
// endpoint and each replica's aggregate answer exactly what a replay of
// the book answers, on a mixed history spread over hours; then a replica
// restarts from a ledger snapshot, which carries the report as a section
// (it folds only the tail), more traffic comes, and they still agree:
// settles and expiries of reservations opened before the restart land in
// the right groups only if the snapshot carried the reservations it
// follows as well as the sums (a snapshot of the sums alone fails the last
// check).
func TestReport_EqualsReplayAcrossRestart(t *testing.T) {
	t.Parallel() // its own harness (server, replicas, clock)
	h := newHarness(t, harnessOpts{replicas: 2, lanes: 2, reports: true})
	h.putBudget("org:acme", "month", "100000", "USD")
	h.putBudget("user:u-1", "day", "100000", "USD")
	h.putBudget("user:u-2", "day", "100000", "USD")
	start := h.clock.now.Load()
	rng := rand.New(rand.NewPCG(12, 1))
	open := h.traffic(rng, 60, "a", nil)
	for i := range 4 { // some stay open across the restart, with a long TTL
		r, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("keep-%d", i), Scopes: []string{"org:acme", "user:u-1"},
			Amount: "1.5", TTL: "20h", Metadata: map[string]string{"model": "claude", "user": "u-9"}})
		require.Nil(t, e)
		open = append(open, r.ReservationID)
	}
	h.requireReportsEqual(start)

	// Restart replica 0 from a ledger snapshot, the report in it.
	_, err := h.replicas[0].Ledger.Snapshot(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, h.replicas[0].Stop())
	nc := h.env.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	r, err := replica.Start(ctxT(t), nc, js, replica.Config{Layout: h.env.Layout, Now: h.clock.now.Load,
		SweepInterval: -1, Reports: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Stop()) })
	require.NotZero(t, r.Ledger.SnapshotStats().Loaded, "the ledger restarted from a snapshot")
	require.NoError(t, r.Reports.Sync(ctxT(t)))
	require.NotZero(t, r.Reports.Loaded(), "the report restarted from the ledger snapshot's section")
	h.replicas[0] = r
	h.requireReportsEqual(start)

	h.traffic(rng, 30, "b", open)
	h.requireReportsEqual(start)
	cells, tracked := r.Reports.Size()
	t.Logf("aggregate: %d cells, %d reservations followed, position %d (loaded %d)", cells, tracked, r.Reports.Position(), r.Reports.Loaded())
}

// TestReport_BadInput: every malformed report request is refused with a
// stable code and a message in the API's words, and the ledger does not
// change.
func TestReport_BadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reports: true})
	h.putBudget("org:acme", "month", "10", "USD")
	for _, tc := range []struct {
		body string
		code events.Code
		want string
	}{
		{`{}`, events.CodeInvalidRequest, `by is required`},
		{`{"by":""}`, events.CodeInvalidRequest, `by is required`},
		{`{"by":7}`, events.CodeInvalidRequest, `by must be a string: "scope" or a metadata key like "model", got a number`},
		{`{"by":"mo del"}`, events.CodeInvalidRequest, `by "mo del": want "scope" or a metadata key`},
		{`{"by":"a.b"}`, events.CodeInvalidRequest, `by "a.b"`},
		{`{"by":"model","period":"day"}`, events.CodeInvalidRequest, `period`},
		{`{"by":"model","from":"yesterday"}`, events.CodeInvalidTime, `from "yesterday" is not an RFC 3339 time`},
		{`{"by":"model","to":"2026-12-01T10:30:00Z"}`, events.CodeInvalidTime, `to "2026-12-01T10:30:00Z" is not on a whole UTC hour`},
		{`{"by":"model","from":"2026-12-01T10:00:00+05:30"}`, events.CodeInvalidTime, `from "2026-12-01T10:00:00+05:30" (2026-12-01T04:30:00Z) is not on a whole UTC hour`},
		{`{"by":"model","from":"2026-12-02T00:00:00Z","to":"2026-12-01T00:00:00Z"}`, events.CodeInvalidTime, `is not before to`},
		{`{"by":"model","from":"2026-12-01T00:00:00Z","to":"2026-12-01T00:00:00Z"}`, events.CodeInvalidTime, `is not before to`},
		{`[1]`, events.CodeInvalidRequest, `JSON object`},
	} {
		t.Run(tc.body, func(t *testing.T) {
			seq, msgs := h.streamState()
			e := h.call(streams.EndpointReport, []byte(tc.body), nil)
			require.NotNil(t, e)
			require.Equal(t, tc.code, e.Code, e.Message)
			require.Contains(t, e.Message, tc.want)
			seq2, msgs2 := h.streamState()
			require.Equal(t, seq, seq2)
			require.Equal(t, msgs, msgs2)
		})
	}
	var ok events.ReportReply
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "model", From: "2026-11-30T00:00:00Z", To: "2026-12-01T00:00:00+01:00"}, &ok))
	require.Empty(t, ok.Groups)
}

// TestReport_Unavailable: a replica without the aggregate answers
// report_unavailable, pointing at the replay.
func TestReport_Unavailable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	e := h.call(streams.EndpointReport, events.ReportRequest{By: "scope"}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeReportUnavailable, e.Code)
	require.Contains(t, e.Message, "--replay")
}

// TestReport_Tenants: on a tenant's subject the report covers that
// tenant's reservations only, with its scopes as it names them, and equals
// the replay with the same tenant selected; on the plain subject, every
// tenant's and the untenanted deployment's. Without the tenant per cell,
// acme's report would count globex's and the untenanted spend too.
func TestReport_Tenants(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reports: true})
	for _, tenant := range []string{"acme", "globex", ""} {
		var e *events.Error
		if tenant == "" {
			h.putBudget("team:search", "day", "100", "USD")
		} else {
			e = h.tcall(tenant, streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: "team:search", Period: "day", Limit: "100", Unit: "USD"}, nil)
		}
		require.Nil(t, e)
		for i, model := range []string{"gpt-x", "mini", "gpt-x"} {
			req := events.AdmitRequest{RequestID: fmt.Sprintf("%s-%d", tenant, i), Scopes: []string{"team:search"}, Amount: "1.5", TTL: "1m",
				Metadata: map[string]string{"model": model}}
			var a events.AdmitReply
			if tenant == "" {
				a, e = h.admit(req)
			} else {
				e = h.tcall(tenant, streams.EndpointAdmit, req, &a)
			}
			require.Nil(t, e)
			require.True(t, a.Admitted)
			if i > 0 {
				var c events.CloseReply
				sreq := events.SettleRequest{ReservationID: a.ReservationID, Actual: fmt.Sprintf("%d.25", i)}
				if tenant == "" {
					c, e = h.settle(a.ReservationID, sreq.Actual)
				} else {
					e = h.tcall(tenant, streams.EndpointSettle, sreq, &c)
				}
				require.Nil(t, e)
			}
		}
	}
	p := projector.New(h.env.JS, h.env.Layout)
	for _, by := range []string{"scope", "model"} {
		g, _, _, err := report.ParseReportRequest(events.ReportRequest{By: by})
		require.NoError(t, err)
		for _, tenant := range []string{"acme", ""} {
			want, err := report.NewReader(h.env.JS, h.env.Layout, p).Report(ctxT(t), report.Filter{OneTenant: tenant != "", Tenant: tenant}, g)
			require.NoError(t, err)
			var got events.ReportReply
			if tenant == "" {
				require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: by}, &got))
			} else {
				require.Nil(t, h.tcall(tenant, streams.EndpointReport, events.ReportRequest{By: by}, &got))
			}
			require.Len(t, got.Groups, len(want.Groups), "%s %q: %v", by, tenant, got.Groups)
			var n int64
			for i, w := range want.Groups {
				v := w.Value
				if tenant != "" && by == "scope" {
					v = string(events.Scope(v).Local())
				}
				require.Equal(t, events.ReportGroup{Value: v, Unit: w.Unit, Reservations: w.Reservations, Open: w.Open,
					Settled: w.Settled, Released: w.Released, Expired: w.Expired, Late: w.Late,
					Spend: w.Spend.String(), Overrun: w.Overrun.String(), Reserved: w.Reserved.String()}, got.Groups[i], "%s %q", by, tenant)
				n += got.Groups[i].Reservations
			}
			if by == "model" {
				require.Equal(t, map[string]int64{"acme": 3, "": 9}[tenant], n, "%q's reservations", tenant)
			}
		}
	}
}

// TestReport_RolledUpHourRefused: once the report has rolled the hours of
// a reservation opened 100 days ago up into its UTC day, a report bounded
// at an hour of that day answers report_unavailable and names the first
// hour still kept, and the ledger does not move; the same day's whole-day
// window still counts the reservation. Without the service's mapping, the
// refusal would answer ledger_unavailable, which tells a finance user the
// ledger is down.
func TestReport_RolledUpHourRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reports: true})
	h.putBudget("org:acme", "lifetime", "10", "USD")
	// The stream's own time bounds how far the report rolls up, so the
	// history is placed before the real present, not the harness's.
	now := time.Now().UTC().Truncate(time.Hour)
	old := now.Add(-100 * 24 * time.Hour).Truncate(24 * time.Hour).Add(10 * time.Hour)
	for i, at := range []time.Time{old, now} {
		h.clock.now.Store(at)
		_, e := h.admit(events.AdmitRequest{RequestID: fmt.Sprintf("r%d", i), Scopes: []string{"org:acme"}, Amount: "1", Metadata: map[string]string{"model": "m"}})
		require.Nil(t, e)
	}
	// The aggregate is fed by the replica's fold, which may not have
	// reached the last admit's revision when its answer came.
	require.NoError(t, h.replicas[0].Reports.Sync(ctxT(t)))
	keptFrom := h.replicas[0].Reports.RolledUpBefore()
	require.False(t, keptFrom.IsZero(), "the reservation 100 days old was rolled up")
	require.True(t, keptFrom.After(old), "kept from %v", keptFrom)

	seq, msgs := h.streamState()
	e := h.call(streams.EndpointReport, events.ReportRequest{By: "model", From: old.Format(time.RFC3339)}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeReportUnavailable, e.Code, e.Message)
	require.Contains(t, e.Message, keptFrom.Format(time.RFC3339))
	require.Contains(t, e.Message, "--replay")
	seq2, msgs2 := h.streamState()
	require.Equal(t, seq, seq2)
	require.Equal(t, msgs, msgs2)

	day := old.Truncate(24 * time.Hour)
	var rep events.ReportReply
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "model",
		From: day.Format(time.RFC3339), To: day.Add(24 * time.Hour).Format(time.RFC3339)}, &rep))
	require.Len(t, rep.Groups, 1)
	require.Equal(t, "m", rep.Groups[0].Value)
	require.EqualValues(t, 1, rep.Groups[0].Reservations)
}
