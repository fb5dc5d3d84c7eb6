package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/streams"
)

// TestGateway_UnknownKeysLimitedPerAddress: a client that sprays distinct
// made-up secrets of spendgate's format, with no login, gets its first 40
// (the burst of the default 20 a second) answered 401 invalid_api_key,
// each after one apikey.resolve, and every one after 429
// too_many_unknown_keys with Retry-After, in the API's error shape,
// without a resolve reaching the replicas; its valid key, cached, still
// works; the refusals' log lines stop at 20. The limiter's clock is frozen,
// so no token comes back while the test runs. How it fails without the
// limiter: all 100 are 401s, each one resolve (100 on the subject), and
// each refusal is logged.
func TestGateway_UnknownKeysLimitedPerAddress(t *testing.T) {
	e := newEnv(t, envOpts{})
	t0 := time.Now()
	gateway.SetAuthClock(e.gw, func() time.Time { return t0 })
	valid := e.key("100", "team:flood")
	body := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`
	resp := e.post("/v1/chat/completions", valid, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, readAll(t, resp))

	// Every apikey.resolve from now on: a plain subscription gets a copy
	// of each request the replica answers.
	snc := e.te.Connect(t)
	sub, err := snc.SubscribeSync(e.te.Layout.Endpoint(streams.EndpointAPIKeyResolve))
	require.NoError(t, err)
	require.NoError(t, snc.Flush())
	// resolves is the count of resolves so far: each call below has its
	// answer, so its resolve reached the server before it, and the server
	// writes it to snc before the answer to Flush.
	resolves := func() int {
		require.NoError(t, snc.Flush())
		n, _, err := sub.Pending()
		require.NoError(t, err)
		return n
	}

	const burst, flood = 2 * gateway.DefaultAuthFailures, 100
	codes := map[int]int{}
	for i := range flood {
		_, secret, err := events.NewAPIKey()
		require.NoError(t, err)
		resp := e.post("/v1/chat/completions", secret, body)
		b := readAll(t, resp)
		codes[resp.StatusCode]++
		if i < burst {
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "call %d: %s", i, b)
			require.Equal(t, "invalid_api_key", resp.Header.Get(gateway.HeaderErrorCode))
			continue
		}
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "call %d: %s", i, b)
		require.Equal(t, gateway.CodeTooManyUnknownKeys, resp.Header.Get(gateway.HeaderErrorCode))
		require.Equal(t, "1", resp.Header.Get("Retry-After"), "a token every 50 ms: the next in at most a second")
		var oa struct {
			Error struct{ Type, Code string }
		}
		require.NoError(t, json.Unmarshal([]byte(b), &oa), b)
		require.Equal(t, gateway.CodeTooManyUnknownKeys, oa.Error.Code, b)
	}
	require.Equal(t, map[int]int{http.StatusUnauthorized: burst, http.StatusTooManyRequests: flood - burst}, codes)
	require.Equal(t, burst, resolves(), "the refused secrets were never looked up")

	// Anthropic's shape, and the gateway's own endpoints, are limited too.
	_, secret, err := events.NewAPIKey()
	require.NoError(t, err)
	resp = e.post("/v1/messages", secret, `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	b := readAll(t, resp)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, b)
	var an struct {
		Type  string
		Error struct{ Type string }
	}
	require.NoError(t, json.Unmarshal([]byte(b), &an), b)
	require.Equal(t, "error", an.Type)
	require.Equal(t, "rate_limit_error", an.Error.Type)
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, e.url+gateway.KeyPath, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err = e.http.Do(req)
	require.NoError(t, err)
	readAll(t, resp)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, burst, resolves())

	// The valid key, from the same address, is not held back.
	resp = e.post("/v1/chat/completions", valid, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, readAll(t, resp))

	require.Equal(t, float64(flood-burst+2), testutil.ToFloat64(e.metrics.AuthLimited))
	require.Equal(t, float64(flood+1), testutil.ToFloat64(e.metrics.Calls.WithLabelValues("chat.completions", gateway.OutcomeUnauthorized))+
		testutil.ToFloat64(e.metrics.Calls.WithLabelValues("messages", gateway.OutcomeUnauthorized)), "every refusal is counted")
	require.Equal(t, 20, strings.Count(e.logs.String(), "outcome=unauthorized"), "the first 20 a minute are logged, no more")
}
