package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/gateway"
	"github.com/spendgate/spendgate/streams"
)

// get sends GET path to base with secret, as the OpenAI SDK does, or as
// the Anthropic SDK does (x-api-key and anthropic-version).
func get(t *testing.T, base, path, secret string, anthropic bool) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), http.MethodGet, base+path, nil)
	require.NoError(t, err)
	if anthropic {
		req.Header.Set("X-Api-Key", secret)
		req.Header.Set("Anthropic-Version", "2023-06-01")
	} else if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, readAll(t, resp)
}

type openAIList struct {
	Object string
	Data   []struct {
		ID, Object string
		OwnedBy    string `json:"owned_by"`
		Created    int64
	}
}

func (l openAIList) ids() []string {
	var out []string
	for _, m := range l.Data {
		out = append(out, m.ID)
	}
	return out
}

// TestGateway_Models: GET /v1/models lists the models a key can call
// (priced, and served by an upstream of the request's kind), in OpenAI's
// shape or, with anthropic-version, Anthropic's; /v1/models/{model} is one
// of them or 404; a key is required; a price put is listed at once.
func TestGateway_Models(t *testing.T) {
	e := newEnv(t, envOpts{})
	secret := e.key("10", "team:m")
	// Both kinds have an upstream without prefixes: each list has its
	// provider's models, Claude's in Anthropic's, the rest (and those an
	// openai upstream claims, dead- and nov1-) in OpenAI's. Before, both
	// lists had every model: the Anthropic SDK listed gpt-x and embed-x.
	all := []string{"dead-x", "embed-x", "gpt-x", "nov1-x"}

	status, _, body := get(t, e.url, "/v1/models", secret, false)
	require.Equal(t, http.StatusOK, status, body)
	var list openAIList
	require.NoError(t, json.Unmarshal([]byte(body), &list), body)
	require.Equal(t, "list", list.Object)
	require.Equal(t, all, list.ids(), "an OpenAI upstream without model prefixes lists every model but Claude's")
	require.Equal(t, "model", list.Data[0].Object)

	status, _, body = get(t, e.url, "/v1/models", secret, true)
	require.Equal(t, http.StatusOK, status, body)
	var alist struct {
		Data []struct {
			Type, ID, DisplayName, CreatedAt string
		}
		HasMore bool    `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &alist), body)
	require.Len(t, alist.Data, 1, "Anthropic's list has Claude's models only: %s", body)
	require.Equal(t, "model", alist.Data[0].Type)
	require.False(t, alist.HasMore)
	require.Equal(t, "claude-x", *alist.FirstID)
	require.Equal(t, "claude-x", *alist.LastID)

	// A model's creation time is when its price was put.
	gp, err := e.admin.GetPrice(ctxT(t), "gpt-x")
	require.NoError(t, err)
	require.False(t, gp.DefinedAt.IsZero())
	status, _, body = get(t, e.url, "/v1/models/gpt-x", secret, false)
	require.Equal(t, http.StatusOK, status, body)
	require.JSONEq(t, fmt.Sprintf(`{"id":"gpt-x","object":"model","created":%d,"owned_by":"spendgate"}`, gp.DefinedAt.Unix()), body)
	require.Equal(t, gp.DefinedAt.Unix(), list.Data[slices.Index(all, "gpt-x")].Created)
	cp, err := e.admin.GetPrice(ctxT(t), "claude-x")
	require.NoError(t, err)
	_, _, body = get(t, e.url, "/v1/models/claude-x", secret, true)
	require.JSONEq(t, fmt.Sprintf(`{"type":"model","id":"claude-x","display_name":"claude-x","created_at":%q}`, cp.DefinedAt.UTC().Format(time.RFC3339)), body)
	status, _, body = get(t, e.url, "/v1/models/gpt-unpriced", secret, false)
	require.Equal(t, http.StatusNotFound, status, body)
	require.Equal(t, "model_not_found", code(t, body))

	status, _, body = get(t, e.url, "/v1/models", "", false)
	require.Equal(t, http.StatusUnauthorized, status, body)
	require.Equal(t, "missing_api_key", code(t, body))
	require.Contains(t, body, "Authorization: Bearer <key>", "as written, not \\u003ckey\\u003e")
	status, _, body = get(t, e.url, "/v1/models", "sgk_nope_0", false)
	require.Equal(t, http.StatusUnauthorized, status, body)

	resp := e.post("/v1/models", secret, `{}`)
	body = readAll(t, resp)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, body)
	require.Equal(t, http.MethodGet, resp.Header.Get("Allow"))
	require.Equal(t, "method_not_allowed", code(t, body))

	// A price put is listed at once: the list reads the ledger.
	_, err = e.admin.PutPrice(ctxT(t), events.PricingPutRequest{Model: "gpt-new", Input: priceIn, Output: priceOut})
	require.NoError(t, err)
	_, _, body = get(t, e.url, "/v1/models", secret, false)
	require.NoError(t, json.Unmarshal([]byte(body), &list), body)
	require.Contains(t, list.ids(), "gpt-new")

	// A gateway whose one upstream serves "gpt-" models lists those only,
	// and nothing in Anthropic's shape.
	cs, err := gateway.NewClientSet(e.te.Connect(t), streams.DefaultPrefix, client.WithTimeout(time.Second))
	require.NoError(t, err)
	root, err := cs.For("")
	require.NoError(t, err)
	g, err := gateway.New(cs, gateway.NewKeys(root, 0), gateway.Config{Upstreams: []gateway.Upstream{
		{Kind: gateway.KindOpenAI, BaseURL: e.dead + "/v1", Key: upstreamKey, Models: []string{"gpt-"}},
	}})
	require.NoError(t, err)
	mux := http.NewServeMux()
	g.Register(mux)
	gs := httptest.NewServer(mux)
	t.Cleanup(gs.Close)
	_, _, body = get(t, gs.URL, "/v1/models", secret, false)
	require.NoError(t, json.Unmarshal([]byte(body), &list), body)
	require.Equal(t, []string{"gpt-new", "gpt-x"}, list.ids())
	_, _, body = get(t, gs.URL, "/v1/models", secret, true)
	require.JSONEq(t, `{"data":[],"has_more":false,"first_id":null,"last_id":null}`, body)
	status, _, body = get(t, gs.URL, "/v1/models/claude-x", secret, false)
	require.Equal(t, http.StatusNotFound, status, "priced, but no upstream serves it: %s", body)
}

// code is the OpenAI-shaped error body's code.
func code(t *testing.T, body string) string {
	t.Helper()
	var shape struct{ Error struct{ Code string } }
	require.NoError(t, json.Unmarshal([]byte(body), &shape), body)
	return shape.Error.Code
}
