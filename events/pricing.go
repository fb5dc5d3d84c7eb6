package events

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/apd/v3"
)

// Pricing: a model's prices live in the ledger bucket under their own key
// (see streams.PricingKey), one revision per change, chained like a budget
// revision. The price version an admit used is the stream sequence of the
// revision it read; the reservation records it with the prices themselves
// (PriceQuote), so a settle from usage prices at the admit's version even
// after the table changed.

// TypePricingDefined is the type of PricingDefined.
const TypePricingDefined Type = "pricing.defined.v1"

// SchemaPricing is the schema of a pricing revision.
const SchemaPricing = "pricing.v1"

// Limits on model names, prices and token counts.
const (
	// MaxModelLen caps a model name.
	MaxModelLen = 128
	// MaxPriceFractionDigits caps the digits after the point of a price
	// per million tokens, so that the price of one token (a millionth of
	// it) has at most MaxFractionDigits: every cost is exact.
	MaxPriceFractionDigits = 6
	// MaxPriceIntegerDigits caps the digits before the point of a price
	// per million tokens (at most 999999.999999 per million).
	MaxPriceIntegerDigits = 6
	// MaxTokens bounds every token or character count of a request: more
	// than any model's context window, so a larger count is a mistake
	// (or an attack), refused with CodeInvalidTokens.
	MaxTokens = 10_000_000
	// CharsPerToken is the conversion of input_chars to tokens: one token
	// per character, an upper bound. Real tokenizers average about four
	// characters of English per token; a byte-level tokenizer makes at
	// most one token per UTF-8 byte, so text that is not ASCII should be
	// counted in UTF-8 bytes.
	CharsPerToken = 1
)

// ValidateModel checks a model name: 1..MaxModelLen characters of
// [A-Za-z0-9_-./], not starting or ending with '.' and with no "..", so
// that it is a valid KV key suffix ("gpt-4o", "claude-3.5-sonnet",
// "openai/gpt-4.1-mini").
func ValidateModel(s string) error {
	if s == "" {
		return Errorf(CodeInvalidModel, "model is empty")
	}
	if len(s) > MaxModelLen {
		return Errorf(CodeInvalidModel, "model is longer than %d characters", MaxModelLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '/') {
			return Errorf(CodeInvalidModel, "model %q may hold only letters, digits, '_', '-', '.' and '/'", s)
		}
	}
	if s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return Errorf(CodeInvalidModel, "model %q must not start or end with '.' or hold \"..\"", s)
	}
	return nil
}

// ParsePrice parses a price per million tokens: a decimal string as
// ParseMoney takes it, with at most MaxPriceIntegerDigits digits before
// the point and MaxPriceFractionDigits after it. what names the field in
// the error ("input", "output", "cached_input").
func ParsePrice(what, s string) (Money, error) {
	if s == "" {
		return Money{}, Errorf(CodeInvalidAmount, "%s is empty: give a price per million tokens like \"2.50\"", what)
	}
	m, err := ParseMoneyField(what, s)
	if err != nil {
		return Money{}, err
	}
	intPart, frac, _ := strings.Cut(s, ".")
	if len(strings.TrimLeft(intPart, "0")) > MaxPriceIntegerDigits {
		return Money{}, Errorf(CodeInvalidAmount, "%s %q has more than %d integer digits (a price per million tokens)", what, s, MaxPriceIntegerDigits)
	}
	if len(strings.TrimRight(frac, "0")) > MaxPriceFractionDigits {
		return Money{}, Errorf(CodeInvalidAmount, "%s %q has more than %d fractional digits (a price per million tokens)", what, s, MaxPriceFractionDigits)
	}
	return m, nil
}

// CheckTokens refuses a negative or absurd token count with
// CodeInvalidTokens; field names it.
func CheckTokens(field string, n int64) error {
	if n < 0 {
		return Errorf(CodeInvalidTokens, "%s is %d: a token count cannot be negative", field, n)
	}
	if n > MaxTokens {
		return Errorf(CodeInvalidTokens, "%s is %d: more than %d is not a real request", field, n, MaxTokens)
	}
	return nil
}

// PricingDefined: a model's prices were set (created or changed). Prices
// are per million tokens in Unit; CachedInput, when set, is the price of
// cached input tokens (otherwise they cost Input).
type PricingDefined struct {
	Model       string `json:"model"`
	Unit        string `json:"unit"`
	Input       Money  `json:"input"`
	Output      Money  `json:"output"`
	CachedInput *Money `json:"cached_input,omitempty"`
	// Changed names the fields this definition changed from the previous
	// one, in the order unit, input, output, cached_input; empty for a new
	// model.
	Changed []string  `json:"changed,omitempty"`
	At      time.Time `json:"at"`
}

// EventType returns TypePricingDefined.
func (PricingDefined) EventType() Type { return TypePricingDefined }

// PricingRevision is the value of a pricing key: the model's prices after
// the revision, chained to the previous revision of the key (see Chain),
// and the event that set them.
type PricingRevision struct {
	Schema string `json:"schema"`
	Chain
	Model       string `json:"model"`
	Unit        string `json:"unit"`
	Input       Money  `json:"input"`
	Output      Money  `json:"output"`
	CachedInput *Money `json:"cached_input,omitempty"`
	Events      Events `json:"events"`
}

// DecodePricingRevision decodes a pricing revision (schema pricing.v1).
func DecodePricingRevision(data []byte) (PricingRevision, error) {
	var r PricingRevision
	if err := json.Unmarshal(data, &r); err != nil {
		return r, err
	}
	if r.Schema != SchemaPricing {
		return r, fmt.Errorf("events: schema %q under a pricing key, want %q", r.Schema, SchemaPricing)
	}
	return r, nil
}

// PriceQuote is what a priced admit reserved against: the model, the
// price version (the stream sequence of the pricing revision read), the
// prices of that version, and the token counts priced. It is recorded in
// every ReservationOpened of the reservation, so a settle from usage
// prices at this version whatever the table says since.
type PriceQuote struct {
	Model       string `json:"model"`
	Version     uint64 `json:"version"`
	Unit        string `json:"unit"`
	Input       Money  `json:"input"`
	Output      Money  `json:"output"`
	CachedInput *Money `json:"cached_input,omitempty"`
	// InputTokens is the input priced: the request's input_tokens, or its
	// input_chars converted at CharsPerToken.
	InputTokens     int64 `json:"input_tokens"`
	MaxOutputTokens int64 `json:"max_output_tokens"`
}

// Usage is what a settle from usage reported; the settle's actual is its
// cost at the reservation's PriceQuote.
type Usage struct {
	InputTokens       int64 `json:"input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens,omitempty"`
	// PriceVersion is the version the cost was computed at (the
	// reservation's PriceQuote.Version).
	PriceVersion uint64 `json:"price_version"`
}

// perToken is 10^-6: prices are per million tokens.
var perToken = Money{d: *apd.New(1, -6)}

// tokensCost returns price * n / 10^6, exactly.
func tokensCost(price Money, n int64) Money {
	return price.Mul(MoneyFromInt(n)).Mul(perToken)
}

// MaxCost is the most the quoted call can cost: every input token at the
// higher of the input and cached input prices, and every possible output
// token at the output price. It is exact: prices have at most
// MaxPriceFractionDigits digits and counts at most MaxTokens.
func (q PriceQuote) MaxCost() Money {
	in := q.Input
	if q.CachedInput != nil {
		in = in.Max(*q.CachedInput)
	}
	return tokensCost(in, q.InputTokens).Add(tokensCost(q.Output, q.MaxOutputTokens))
}

// Cost is what usage u costs at the quote's prices: cached input tokens at
// the cached input price (the input price when the model has none), the
// rest of the input at the input price, output at the output price.
func (q PriceQuote) Cost(u Usage) Money {
	cached := q.Input
	if q.CachedInput != nil {
		cached = *q.CachedInput
	}
	return tokensCost(q.Input, u.InputTokens-u.CachedInputTokens).
		Add(tokensCost(cached, u.CachedInputTokens)).
		Add(tokensCost(q.Output, u.OutputTokens))
}

// ValidateUsage checks the counts of a settle from usage: none negative
// or above MaxTokens, and cached input tokens no more than input tokens.
// Errors: CodeInvalidTokens.
func ValidateUsage(u Usage) error {
	if err := CheckTokens("input_tokens", u.InputTokens); err != nil {
		return err
	}
	if err := CheckTokens("output_tokens", u.OutputTokens); err != nil {
		return err
	}
	if err := CheckTokens("cached_input_tokens", u.CachedInputTokens); err != nil {
		return err
	}
	if u.CachedInputTokens > u.InputTokens {
		return Errorf(CodeInvalidTokens, "cached_input_tokens %d is more than input_tokens %d", u.CachedInputTokens, u.InputTokens)
	}
	return nil
}
