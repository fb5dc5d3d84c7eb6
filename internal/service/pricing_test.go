package service_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/report"
	"github.com/spendgate/spendgate/projector"
	"github.com/spendgate/spendgate/streams"
	"github.com/spendgate/spendgate/testenv"
)

func (h *harness) putPrice(req events.PricingPutRequest) events.PricingPutReply {
	h.t.Helper()
	var v events.PricingPutReply
	require.Nil(h.t, h.call(streams.EndpointPricingPut, req, &v))
	return v
}

// TestPricing_AdmitSettleFromUsage: an admit priced from a model reserves
// its maximum cost exactly and records the price version; a price change
// mid-flight leaves the open reservation at its version, and its settle
// from usage is priced there; a new admit uses the new version.
func TestPricing_AdmitSettleFromUsage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{replicas: 2})
	h.putBudget("org:acme", "month", "100", "USD")
	h.putBudget("user:u1", "day", "1000", "requests")
	v1 := h.putPrice(events.PricingPutRequest{Model: "gpt-x.1", Input: "2.5", Output: "10", CachedInput: "1.25"})
	require.True(t, v1.Created)
	require.NotZero(t, v1.Version)

	a, e := h.admit(events.AdmitRequest{RequestID: "p1", Scopes: []string{"org:acme", "user:u1"}, Model: "gpt-x.1", InputTokens: 1200, MaxOutputTokens: 800})
	require.Nil(t, e)
	require.True(t, a.Admitted, "%+v", a.Denial)
	// 1200 x 2.5 + 800 x 10 = 11000 per million.
	require.Equal(t, "0.011", a.Amount)
	require.Equal(t, "USD", a.Unit)
	require.Equal(t, v1.Version, a.Pricing.Version)
	require.Equal(t, "0.011", a.Budgets[0].Amount)
	require.Equal(t, "1", a.Budgets[1].Amount, "a requests budget counts 1")

	// Characters are priced at one token each.
	c, e := h.admit(events.AdmitRequest{RequestID: "p-chars", Scopes: []string{"org:acme"}, Model: "gpt-x.1", InputChars: 4000, MaxOutputTokens: 100})
	require.Nil(t, e)
	require.Equal(t, "0.011", c.Amount) // 4000 x 2.5 + 100 x 10 = 11000 per million
	require.Equal(t, int64(4000), c.Pricing.InputTokens)

	// The price changes while p1 is open.
	v2 := h.putPrice(events.PricingPutRequest{Model: "gpt-x.1", Input: "5", Output: "20"})
	require.Equal(t, []string{"input", "output", "cached_input"}, v2.Changed)
	require.Equal(t, "2.5", v2.Previous.Input)
	require.Greater(t, v2.Version, v1.Version)

	var s events.CloseReply
	require.Nil(t, h.call(streams.EndpointSettle, events.SettleRequest{ReservationID: a.ReservationID, InputTokens: 1200, CachedInputTokens: 1000, OutputTokens: 640}, &s))
	// At v1: 200 x 2.5 + 1000 x 1.25 + 640 x 10 = 8150 per million.
	require.Equal(t, "0.00815", s.Actual)
	require.Equal(t, v1.Version, s.Usage.PriceVersion)
	// The same usage again is a replay, whose reply says the usage as the
	// first did (a fresh decode: before, it had none).
	var again events.CloseReply
	require.Nil(t, h.call(streams.EndpointSettle, events.SettleRequest{ReservationID: a.ReservationID, InputTokens: 1200, CachedInputTokens: 1000, OutputTokens: 640}, &again))
	require.True(t, again.Replayed)
	require.Equal(t, s.Actual, again.Actual)
	require.Equal(t, s.Usage, again.Usage)

	// A price change takes effect on each replica as it folds it (like a
	// budget change): wait for both before the admit that must use it.
	for _, r := range h.replicas {
		testenv.WaitFor(t, 10*time.Second, "every replica folded the new price", func() bool {
			p, ok := r.Ledger.Price("gpt-x.1")
			return ok && p.Version == v2.Version
		})
	}
	b, e := h.admit(events.AdmitRequest{RequestID: "p2", Scopes: []string{"org:acme"}, Model: "gpt-x.1", InputTokens: 1200, MaxOutputTokens: 800})
	require.Nil(t, e)
	require.Equal(t, "0.022", b.Amount)
	require.Equal(t, v2.Version, b.Pricing.Version)
	// A retry of p1's body replays at v1's amount.
	r, e := h.admit(events.AdmitRequest{RequestID: "p1", Scopes: []string{"org:acme", "user:u1"}, Model: "gpt-x.1", InputTokens: 1200, MaxOutputTokens: 800})
	require.Nil(t, e)
	require.True(t, r.Replayed)
	require.Equal(t, "0.011", r.Amount)

	// Spent is the usage's cost; reserved is what is still open.
	bv := h.budget("org:acme", "month")
	require.Equal(t, "0.00815", bv.Spent)
	require.Equal(t, "0.033", bv.Reserved)

	// A reservation not priced from a model cannot settle from usage.
	plain, e := h.admit(events.AdmitRequest{RequestID: "plain", Scopes: []string{"org:acme"}, Amount: "1"})
	require.Nil(t, e)
	e = h.call(streams.EndpointSettle, events.SettleRequest{ReservationID: plain.ReservationID, InputTokens: 5}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeNotPriced, e.Code)

	// The export carries the quote and the usage of priced reservations.
	var out bytes.Buffer
	_, err := report.NewReader(h.env.JS, h.env.Layout, projector.New(h.env.JS, h.env.Layout)).ExportJSONL(context.Background(), &out, report.Filter{Hold: 1})
	require.NoError(t, err)
	var priced int
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.Contains(line, `"request_id":"p1"`) {
			require.Contains(t, line, `"usage":{"input_tokens":1200,"output_tokens":640,"cached_input_tokens":1000,"price_version":`)
			require.Contains(t, line, `"pricing":{"model":"gpt-x.1"`)
			priced++
		}
	}
	require.Equal(t, 1, priced, out.String())

	var g events.PriceView
	require.Nil(t, h.call(streams.EndpointPricingGet, events.PricingGetRequest{Model: "gpt-x.1"}, &g))
	require.Equal(t, v2.PriceView, g)
	var l events.PricingListReply
	require.Nil(t, h.call(streams.EndpointPricingList, struct{}{}, &l))
	require.Equal(t, []events.PriceView{g}, l.Prices)
}

// TestPricing_Refused: an unpriced model is denied (never costed at zero),
// and negative, absurd or inconsistent counts are refused with stable
// codes; none of them changes the stream.
func TestPricing_Refused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	h.putBudget("org:acme", "month", "100", "USD")
	h.putPrice(events.PricingPutRequest{Model: "gpt-x", Input: "2.5", Output: "10"})
	seq, msgs := h.streamState()

	a, e := h.admit(events.AdmitRequest{RequestID: "u1", Scopes: []string{"org:acme"}, Model: "gpt-unpriced", InputTokens: 10, MaxOutputTokens: 10})
	require.Nil(t, e)
	require.False(t, a.Admitted)
	require.Equal(t, events.ReasonUnpricedModel, a.Denial.Reason)
	require.Equal(t, "gpt-unpriced", a.Denial.Model)

	for _, c := range []struct {
		name string
		body string
		code events.Code
	}{
		{"negative max_output_tokens", `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x","input_tokens":10,"max_output_tokens":-5}`, events.CodeInvalidTokens},
		{"negative input_tokens", `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x","input_tokens":-1,"max_output_tokens":5}`, events.CodeInvalidTokens},
		{"absurd input_tokens", `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x","input_tokens":10000001,"max_output_tokens":5}`, events.CodeInvalidTokens},
		{"absurd input_chars", `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x","input_chars":99999999999,"max_output_tokens":5}`, events.CodeInvalidTokens},
		{"tokens and chars", `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x","input_tokens":1,"input_chars":4,"max_output_tokens":5}`, events.CodeInvalidTokens},
		{"nothing to price", `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x"}`, events.CodeInvalidTokens},
		{"fractional tokens", `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x","input_tokens":1.5,"max_output_tokens":5}`, events.CodeInvalidRequest},
		{"beyond int64", `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x","input_tokens":1e30,"max_output_tokens":5}`, events.CodeInvalidRequest},
		{"amount and model", `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x","amount":"1","max_output_tokens":5}`, events.CodeInvalidRequest},
		{"tokens without model", `{"request_id":"r","scopes":["org:acme"],"amount":"1","max_output_tokens":5}`, events.CodeInvalidRequest},
		{"bad model", `{"request_id":"r","scopes":["org:acme"],"model":"gpt x","max_output_tokens":5}`, events.CodeInvalidModel},
		{"wrong unit", `{"request_id":"r","scopes":["org:acme"],"model":"gpt-x","unit":"EUR","max_output_tokens":5}`, events.CodeInvalidUnit},
	} {
		e := h.call(streams.EndpointAdmit, []byte(c.body), nil)
		require.NotNil(t, e, c.name)
		require.Equal(t, c.code, e.Code, "%s: %s", c.name, e.Message)
	}
	for _, c := range []struct {
		name string
		body string
		code events.Code
	}{
		{"negative output", `{"reservation_id":"rsv_x","input_tokens":1,"output_tokens":-1}`, events.CodeInvalidTokens},
		{"cached above input", `{"reservation_id":"rsv_x","input_tokens":1,"cached_input_tokens":2}`, events.CodeInvalidTokens},
		{"actual and usage", `{"reservation_id":"rsv_x","actual":"1","output_tokens":1}`, events.CodeInvalidRequest},
	} {
		e := h.call(streams.EndpointSettle, []byte(c.body), nil)
		require.NotNil(t, e, c.name)
		require.Equal(t, c.code, e.Code, "%s: %s", c.name, e.Message)
	}
	for _, c := range []struct {
		req  events.PricingPutRequest
		code events.Code
	}{
		{events.PricingPutRequest{Model: "m", Input: "-1", Output: "1"}, events.CodeInvalidAmount},
		{events.PricingPutRequest{Model: "m", Input: "0.0000001", Output: "1"}, events.CodeInvalidAmount},
		{events.PricingPutRequest{Model: "m", Input: "1", Output: ""}, events.CodeInvalidAmount},
		{events.PricingPutRequest{Model: "m", Unit: "requests", Input: "1", Output: "1"}, events.CodeInvalidUnit},
		{events.PricingPutRequest{Model: "m*", Input: "1", Output: "1"}, events.CodeInvalidModel},
	} {
		e := h.call(streams.EndpointPricingPut, c.req, nil)
		require.NotNil(t, e, "%+v", c.req)
		require.Equal(t, c.code, e.Code, "%+v: %s", c.req, e.Message)
	}
	e = h.call(streams.EndpointPricingGet, events.PricingGetRequest{Model: "gpt-unpriced"}, nil)
	require.NotNil(t, e)
	require.Equal(t, events.CodeUnpricedModel, e.Code)

	seq2, msgs2 := h.streamState()
	require.Equal(t, seq, seq2, "nothing refused wrote to the ledger")
	require.Equal(t, msgs, msgs2)
}

// TestPricing_ReportsByModel: a priced admit counts under its model in a
// report by model (the model is in the reservation's price quote; before,
// an admit whose metadata named no model landed in ""), a caller's own
// metadata model is kept, and the CSV export carries the model, the price
// version and the token counts of priced reservations.
func TestPricing_ReportsByModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{reports: true})
	h.putBudget("org:acme", "month", "100", "USD")
	v1 := h.putPrice(events.PricingPutRequest{Model: "gpt-x.1", Input: "2.5", Output: "10", CachedInput: "1.25"})
	p1, e := h.admit(events.AdmitRequest{RequestID: "p1", Scopes: []string{"org:acme"}, Model: "gpt-x.1", InputTokens: 1200, MaxOutputTokens: 800})
	require.Nil(t, e)
	require.True(t, p1.Admitted)
	_, e = h.admit(events.AdmitRequest{RequestID: "p2", Scopes: []string{"org:acme"}, Model: "gpt-x.1", InputTokens: 10, MaxOutputTokens: 10,
		Metadata: map[string]string{"model": "label-x", "user": "u-1"}})
	require.Nil(t, e)
	_, e = h.admit(events.AdmitRequest{RequestID: "plain", Scopes: []string{"org:acme"}, Amount: "1", Metadata: map[string]string{"model": "manual"}})
	require.Nil(t, e)
	require.Nil(t, h.call(streams.EndpointSettle, events.SettleRequest{ReservationID: p1.ReservationID, InputTokens: 1200, CachedInputTokens: 1000, OutputTokens: 640}, nil))

	var rep events.ReportReply
	require.Nil(t, h.call(streams.EndpointReport, events.ReportRequest{By: "model"}, &rep))
	got := map[string]int64{}
	for _, g := range rep.Groups {
		got[g.Value] = g.Reservations
	}
	require.Equal(t, map[string]int64{"gpt-x.1": 1, "label-x": 1, "manual": 1}, got)
	want, err := report.NewReader(h.env.JS, h.env.Layout, projector.New(h.env.JS, h.env.Layout)).Report(ctxT(t), report.Filter{}, report.ByMetadata("model"))
	require.NoError(t, err)
	require.Len(t, want.Groups, 3, "the replay agrees")
	for _, g := range want.Groups {
		require.Equal(t, got[g.Value], g.Reservations, g.Value)
	}

	var out bytes.Buffer
	_, err = report.NewReader(h.env.JS, h.env.Layout, projector.New(h.env.JS, h.env.Layout)).ExportCSV(context.Background(), &out, report.Filter{Hold: 1})
	require.NoError(t, err)
	rows, err := csv.NewReader(&out).ReadAll()
	require.NoError(t, err)
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, name := range []string{"model", "price_version", "quoted_input_tokens", "quoted_max_output_tokens", "input_tokens", "output_tokens", "cached_input_tokens", "metadata.model"} {
		require.Contains(t, col, name)
	}
	byID := map[string][]string{}
	for _, r := range rows[1:] {
		byID[r[col["request_id"]]] = r
	}
	version := strconv.FormatUint(v1.Version, 10)
	cells := func(id string, names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, byID[id][col[n]])
		}
		return out
	}
	names := []string{"model", "price_version", "quoted_input_tokens", "quoted_max_output_tokens", "input_tokens", "output_tokens", "cached_input_tokens",
		"price_input", "price_output", "price_cached_input", "metadata.model"}
	require.Equal(t, []string{"gpt-x.1", version, "1200", "800", "1200", "640", "1000", "2.5", "10", "1.25", "gpt-x.1"}, cells("p1", names...))
	require.Equal(t, []string{"gpt-x.1", version, "10", "10", "", "", "", "2.5", "10", "1.25", "label-x"}, cells("p2", names...))
	require.Equal(t, []string{"", "", "", "", "", "", "", "", "", "", "manual"}, cells("plain", names...))
}
