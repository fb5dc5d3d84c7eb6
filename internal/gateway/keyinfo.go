package gateway

import (
	"errors"
	"net/http"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
)

// KeyPath answers, to the holder of a key, the budgets its calls are
// admitted against: GET KeyPath with the key, as a call sends it. A
// developer sees what is left before a call is denied, without a key of
// the HTTP API. A key sees its own scopes only, and nothing a denial of
// its own calls would not show.
const KeyPath = "/v1/key"

// KeyInfo is the answer of GET KeyPath.
type KeyInfo struct {
	// ID is the key's id (the prefix its listings show).
	ID string `json:"id"`
	// Tenant is the key's tenant, when it has one; its scopes are then
	// the tenant's names.
	Tenant string `json:"tenant,omitempty"`
	// Scopes are the scopes every call of the key is admitted against.
	Scopes []string `json:"scopes"`
	// Budgets are every budget of those scopes with its balance in the
	// current period, scope by scope in the key's order, then by period.
	Budgets []events.BudgetView `json:"budgets"`
	// WithoutBudget are the scopes that have no budget of their own: a
	// call is admitted against the default of the scope's kind (kind:*)
	// from its first admit on, and denied when there is none.
	WithoutBudget []string `json:"without_budget"`
}

// registerKey adds GET KeyPath to mux, and the API's 405 for any other
// method on it.
func (g *Gateway) registerKey(mux interface{ Handle(string, http.Handler) }) {
	mux.Handle("GET "+KeyPath, http.HandlerFunc(g.keyInfo))
	mux.Handle(KeyPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		methodNotAllowed(w, r, modelsKind(r), http.MethodGet)
	}))
}

// keyInfo answers KeyInfo for the request's key: each of its scopes'
// budgets, read from the ledger (budget.get by scope, on the key's
// tenant's subject for a tenant's key).
func (g *Gateway) keyInfo(w http.ResponseWriter, r *http.Request) {
	kind := modelsKind(r)
	ctx := r.Context()
	key, cl, ok := g.keyed(w, r, kind)
	if !ok {
		return
	}
	info := KeyInfo{ID: key.ID, Tenant: key.Tenant, Scopes: key.Scopes, Budgets: []events.BudgetView{}, WithoutBudget: []string{}}
	for _, scope := range key.Scopes {
		v, err := cl.GetScopeBudgets(ctx, scope)
		switch {
		case errors.Is(err, client.ErrNotFound):
			info.WithoutBudget = append(info.WithoutBudget, scope)
		case err != nil:
			(&callError{status: http.StatusServiceUnavailable, typ: "server_error", code: "ledger_unavailable",
				msg: "spendgate: the ledger did not answer the budgets of " + scope}).write(w, kind)
			return
		default:
			info.Budgets = append(info.Budgets, v.Budgets...)
		}
	}
	writeJSON(w, info)
}
