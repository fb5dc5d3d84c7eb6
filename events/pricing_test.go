package events_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

func goldenPricingDefined() events.PricingDefined {
	cached := events.MustMoney("1.25")
	return events.PricingDefined{
		Model: "openai/gpt-4.1", Unit: "USD",
		Input: events.MustMoney("2.5"), Output: events.MustMoney("10"), CachedInput: &cached,
		Changed: []string{"input", "cached_input"}, At: fixedAt,
	}
}

func goldenQuote() *events.PriceQuote {
	cached := events.MustMoney("1.25")
	return &events.PriceQuote{Model: "openai/gpt-4.1", Version: 17, Unit: "USD",
		Input: events.MustMoney("2.5"), Output: events.MustMoney("10"), CachedInput: &cached,
		InputTokens: 1200, MaxOutputTokens: 800}
}

// TestPricingDefined_Golden freezes pricing.defined.v1 and its pricing.v1
// revision, and the optional pricing and usage fields of the reservation
// events (their plain goldens, without them, are unchanged).
func TestPricingDefined_Golden(t *testing.T) {
	ev := goldenPricingDefined()
	got, err := events.EncodeEvent(ev)
	require.NoError(t, err)
	b := golden(t, string(events.TypePricingDefined)+".json", got)
	back, err := events.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, events.Event(ev), back)

	rev := events.PricingRevision{Schema: events.SchemaPricing, Chain: events.Chain{Prev: 16, PrevHash: events.HashPayload([]byte("revision 16"))},
		Model: ev.Model, Unit: ev.Unit, Input: ev.Input, Output: ev.Output, CachedInput: ev.CachedInput, Events: events.Events{ev}}
	got, err = json.Marshal(rev)
	require.NoError(t, err)
	b = golden(t, events.SchemaPricing+".json", got)
	backRev, err := events.DecodePricingRevision(b)
	require.NoError(t, err)
	require.Equal(t, rev, backRev)

	opened := goldenEvents()[1].(events.ReservationOpened)
	opened.Pricing = goldenQuote()
	opened.Amount = opened.Pricing.MaxCost()
	got, err = events.EncodeEvent(opened)
	require.NoError(t, err)
	b = golden(t, "reservation.opened.v1.priced.json", got)
	back, err = events.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, events.Event(opened), back)

	settled := goldenEvents()[2].(events.ReservationSettled)
	settled.Usage = &events.Usage{InputTokens: 1200, OutputTokens: 640, CachedInputTokens: 1000, PriceVersion: 17}
	got, err = events.EncodeEvent(settled)
	require.NoError(t, err)
	b = golden(t, "reservation.settled.v1.usage.json", got)
	back, err = events.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, events.Event(settled), back)
}

// TestPriceQuote_MaxCost: the maximum cost is exact for a table of prices
// and token counts, at the largest prices and counts accepted too.
func TestPriceQuote_MaxCost(t *testing.T) {
	for _, c := range []struct {
		in, out, cached string
		input, maxOut   int64
		want            string
	}{
		{"2.5", "10", "", 1200, 800, "0.011"},
		{"0.15", "0.6", "", 1, 1, "0.00000075"},
		{"0.000001", "0.000001", "", 1, 0, "0.000000000001"},
		{"3", "15", "0.3", 100000, 4096, "0.36144"},
		{"1.25", "10", "2", 1000, 0, "0.002"}, // a cached price above input reserves at it
		{"0", "0", "", 5, 5, "0"},
		{"999999.999999", "999999.999999", "", events.MaxTokens, events.MaxTokens, "19999999.99998"},
		{"0.1", "0.2", "", 3, 3, "0.0000009"}, // no float: 0.1*3 + 0.2*3 is exactly 0.9 per million
	} {
		q := events.PriceQuote{Input: events.MustMoney(c.in), Output: events.MustMoney(c.out), InputTokens: c.input, MaxOutputTokens: c.maxOut}
		if c.cached != "" {
			m := events.MustMoney(c.cached)
			q.CachedInput = &m
		}
		require.Equal(t, c.want, q.MaxCost().String(), "%+v", c)
	}
}

func TestPriceQuote_Cost(t *testing.T) {
	cached := events.MustMoney("1.25")
	q := events.PriceQuote{Input: events.MustMoney("2.5"), Output: events.MustMoney("10"), CachedInput: &cached}
	// 200 x 2.5 + 1000 x 1.25 + 640 x 10 = 500 + 1250 + 6400 = 8150 per million.
	require.Equal(t, "0.00815", q.Cost(events.Usage{InputTokens: 1200, CachedInputTokens: 1000, OutputTokens: 640}).String())
	q.CachedInput = nil
	require.Equal(t, "0.0094", q.Cost(events.Usage{InputTokens: 1200, CachedInputTokens: 1000, OutputTokens: 640}).String())
}

func TestPricing_BadInput(t *testing.T) {
	for _, m := range []string{"", ".gpt", "gpt.", "a..b", "gpt 4", "gpt*", "gpt>", "gpt:4", string(make([]byte, 129))} {
		require.Equal(t, events.CodeInvalidModel, events.CodeOf(events.ValidateModel(m)), "%q", m)
	}
	for _, m := range []string{"gpt-4o", "claude-3.5-sonnet", "openai/gpt-4.1-mini", "llama3_8b"} {
		require.NoError(t, events.ValidateModel(m))
	}
	for _, p := range []string{"", "-1", "1e3", "NaN", "0.0000001", "1000000", "1.5.5"} {
		_, err := events.ParsePrice("input", p)
		require.Equal(t, events.CodeInvalidAmount, events.CodeOf(err), "%q", p)
	}
	for _, p := range []string{"0", "2.50", "999999.999999", "0.000001", "0.0000010"} {
		_, err := events.ParsePrice("input", p)
		require.NoError(t, err, "%q", p)
	}
	require.Equal(t, events.CodeInvalidTokens, events.CodeOf(events.CheckTokens("max_output_tokens", -1)))
	require.Equal(t, events.CodeInvalidTokens, events.CodeOf(events.CheckTokens("input_tokens", events.MaxTokens+1)))
	require.Equal(t, events.CodeInvalidTokens, events.CodeOf(events.ValidateUsage(events.Usage{InputTokens: 1, CachedInputTokens: 2})))
}
