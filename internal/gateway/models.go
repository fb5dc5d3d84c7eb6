package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
)

// ModelsPath lists the models a key can call through the gateway: GET
// ModelsPath, and GET ModelsPath/{model} for one. Tools that take an
// OpenAI-compatible base URL (chat front ends, editors) read it to offer
// their model list.
const ModelsPath = "/v1/models"

// A listed model's creation time, which both APIs require, is when its
// price was put in the pricing table (PriceView.DefinedAt), or the Unix
// epoch for a price whose time is not known.

// registerModels adds GET ModelsPath and GET ModelsPath/{model} to mux,
// and the API's 405 for any other method on them.
func (g *Gateway) registerModels(mux interface{ Handle(string, http.Handler) }) {
	for _, path := range []string{ModelsPath, ModelsPath + "/{model}"} {
		mux.Handle("GET "+path, http.HandlerFunc(g.models))
		mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			methodNotAllowed(w, r, modelsKind(r), http.MethodGet)
		}))
	}
}

// modelsKind is the API whose shape a models request gets: Anthropic's
// when it carries an anthropic-version header (its SDK always sends one),
// else OpenAI's.
func modelsKind(r *http.Request) string {
	if r.Header.Get("Anthropic-Version") != "" {
		return KindAnthropic
	}
	return KindOpenAI
}

// models answers the models the key can call: those the pricing table
// prices (an unpriced model is denied) and an upstream of the request's
// kind serves (listedKind), sorted by name. A key that may call only the HTTP API, or
// of a tenant this gateway cannot serve, gets the proxy's refusal.
func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	kind := modelsKind(r)
	ctx := r.Context()
	_, cl, ok := g.keyed(w, r, kind)
	if !ok {
		return
	}
	prices, err := cl.ListPrices(ctx)
	if err != nil {
		(&callError{status: http.StatusServiceUnavailable, typ: "server_error", code: "ledger_unavailable",
			msg: "spendgate: the ledger did not answer the pricing list"}).write(w, kind)
		return
	}
	var ids []string
	at := map[string]time.Time{}
	for _, p := range prices.Prices {
		if listedKind(g.ups, p.Model) == kind {
			ids = append(ids, p.Model)
			at[p.Model] = p.DefinedAt.UTC()
		}
	}
	one := r.PathValue("model")
	if one != "" && !slices.Contains(ids, one) {
		(&callError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found",
			msg: "spendgate: model " + one + " has no price in the pricing table, or no upstream of this gateway serves it", noRetry: true}).write(w, kind)
		return
	}
	var body any
	switch {
	case kind == KindAnthropic && one != "":
		body = anthropicModel(one, at[one])
	case kind == KindAnthropic:
		list := anthropicModels{Data: make([]anthropicModelInfo, 0, len(ids))}
		for _, id := range ids {
			list.Data = append(list.Data, anthropicModel(id, at[id]))
		}
		if len(ids) > 0 {
			list.FirstID, list.LastID = &ids[0], &ids[len(ids)-1]
		}
		body = list
	case one != "":
		body = openAIModel{ID: one, Object: "model", Created: unixOf(at[one]), OwnedBy: "spendgate"}
	default:
		list := openAIModels{Object: "list", Data: make([]openAIModel, 0, len(ids))}
		for _, id := range ids {
			list.Data = append(list.Data, openAIModel{ID: id, Object: "model", Created: unixOf(at[id]), OwnedBy: "spendgate"})
		}
		body = list
	}
	writeJSON(w, body)
}

// listedKind is the API whose model list names model ("" for none): the
// kind of the upstream that claims it by the longest prefix (models=), of
// either kind; else, for a model no upstream claims, the kind whose
// upstream without prefixes takes it, and when both kinds have one (each
// would take any model), Anthropic's for a Claude model (its name starts
// "claude") and OpenAI's for the rest. So each SDK's models.list() shows
// its own provider's models, not the other's. Calls are routed as before
// (route): this decides the lists only.
func listedKind(ups []*upstream, model string) string {
	kind, best := "", -1
	for _, u := range ups {
		for _, p := range u.Models {
			if strings.HasPrefix(model, p) && len(p) > best {
				kind, best = u.Kind, len(p)
			}
		}
	}
	if kind != "" {
		return kind
	}
	openai, anthropic := route(ups, KindOpenAI, model) != nil, route(ups, KindAnthropic, model) != nil
	switch {
	case openai && anthropic && strings.HasPrefix(model, "claude"):
		return KindAnthropic
	case openai:
		return KindOpenAI
	case anthropic:
		return KindAnthropic
	}
	return ""
}

// writeJSON answers body as JSON (200).
func writeJSON(w http.ResponseWriter, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// keyed authorizes the key of a request the gateway answers itself (GET
// ModelsPath, KeyPath) and returns it with its tenant's client; on a
// failure it answers the error in kind's shape and returns false.
func (g *Gateway) keyed(w http.ResponseWriter, r *http.Request, kind string) (events.APIKeyResolveReply, *client.Client, bool) {
	key, _, cerr := g.authorize(r.Context(), r)
	if cerr == nil {
		var cl *client.Client
		if cl, cerr = g.clientFor(key); cerr == nil {
			return key, cl, true
		}
	}
	cerr.write(w, kind)
	return key, nil, false
}

// openAIModel and openAIModels are OpenAI's model object and list.
type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type openAIModels struct {
	Object string        `json:"object"`
	Data   []openAIModel `json:"data"`
}

// anthropicModelInfo and anthropicModels are Anthropic's model object and
// list (one page: has_more is false).
type anthropicModelInfo struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

type anthropicModels struct {
	Data    []anthropicModelInfo `json:"data"`
	HasMore bool                 `json:"has_more"`
	FirstID *string              `json:"first_id"`
	LastID  *string              `json:"last_id"`
}

func anthropicModel(id string, at time.Time) anthropicModelInfo {
	if at.IsZero() {
		at = time.Unix(0, 0).UTC()
	}
	return anthropicModelInfo{Type: "model", ID: id, DisplayName: id, CreatedAt: at.Format(time.RFC3339)}
}

// unixOf is at in Unix seconds, 0 for the zero time.
func unixOf(at time.Time) int64 {
	if at.IsZero() {
		return 0
	}
	return at.Unix()
}

// methodNotAllowed answers a method a path does not take, in kind's error
// shape, with Allow (the mux's own 405 is a line of plain text, which the
// SDKs cannot read).
func methodNotAllowed(w http.ResponseWriter, r *http.Request, kind, allow string) {
	w.Header().Set("Allow", allow)
	(&callError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error", code: "method_not_allowed",
		msg: "spendgate: " + r.Method + " " + r.URL.Path + ": this endpoint takes " + allow, noRetry: true}).write(w, kind)
}
