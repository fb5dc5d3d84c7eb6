package gateway

import (
	"errors"
	"net/http"
	"slices"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
)

// KeyPath answers, to the holder of a key, the budgets its calls are
// admitted against: GET KeyPath with the key, as a call sends it. A
// developer sees what is left before a call is denied, without a key of
// the HTTP API. A key sees its own scopes only, and its end users' and
// runs' when it has those kinds (HeaderEndUser, HeaderRun name one): nothing
// a denial of its own calls would not show.
const KeyPath = "/v1/key"

// KeyInfo is the answer of GET KeyPath.
type KeyInfo struct {
	// ID is the key's id (the prefix its listings show).
	ID string `json:"id"`
	// Tenant is the key's tenant, when it has one; its scopes are then
	// the tenant's names.
	Tenant string `json:"tenant,omitempty"`
	// EndUser and Run are the key's end-user and run scope kinds, when
	// it has them: each of its calls names its end user (run) and is
	// admitted against "<kind>:<end user>" ("<kind>:<run>") too.
	EndUser string `json:"end_user,omitempty"`
	Run     string `json:"run,omitempty"`
	// Scopes are the scopes a call of the key is admitted against: the
	// key's own, then EndUserScope and RunScope when the request names
	// them.
	Scopes []string `json:"scopes"`
	// EndUserScope and RunScope are the scopes of the end user and the
	// run the request names in HeaderEndUser and HeaderRun, for a key
	// with those kinds ("" when it names none, or the key has no such
	// kind: a call ignores the header then too).
	EndUserScope string `json:"end_user_scope,omitempty"`
	RunScope     string `json:"run_scope,omitempty"`
	// Budgets are every budget of those scopes with its balance in the
	// current period, scope by scope in Scopes' order, then by period.
	Budgets []events.BudgetView `json:"budgets"`
	// WithoutBudget are the scopes that have no budget of their own: a
	// call is admitted against the default of the scope's kind (kind:*)
	// from its first admit on, and denied when there is none. A read
	// creates no budget.
	WithoutBudget []string `json:"without_budget"`
	// Defaults are the defaults (scope "<kind>:*") of the kinds of the
	// scopes in WithoutBudget: the budgets a first call makes for such a
	// scope, each with its limit, period and unit (its balance figures
	// are the default's own, not a scope's). A scope in WithoutBudget
	// whose kind has none is denied unknown_budget.
	Defaults []events.BudgetView `json:"defaults"`
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
// budgets, and those of the end user and run the request's headers name,
// read from the ledger (budget.get by scope, on the key's tenant's
// subject for a tenant's key). Errors: the calls' 400 invalid_end_user and
// invalid_run for a name no scope can hold.
func (g *Gateway) keyInfo(w http.ResponseWriter, r *http.Request) {
	kind := modelsKind(r)
	ctx := r.Context()
	key, cl, ok := g.keyed(w, r, kind)
	if !ok {
		return
	}
	info := KeyInfo{ID: key.ID, Tenant: key.Tenant, EndUser: key.EndUser, Run: key.Run, Scopes: key.Scopes,
		Budgets: []events.BudgetView{}, WithoutBudget: []string{}, Defaults: []events.BudgetView{}}
	for _, n := range []struct {
		header, kind string
		scope        func(events.APIKeyResolveReply, string) (string, *callError)
		set          *string
	}{
		{HeaderEndUser, key.EndUser, endUserScope, &info.EndUserScope},
		{HeaderRun, key.Run, runScope, &info.RunScope},
	} {
		name := r.Header.Get(n.header)
		if name == "" || n.kind == "" {
			continue // as a call of a key without the kind ignores it
		}
		scope, cerr := n.scope(key, name)
		if cerr != nil {
			cerr.write(w, kind)
			return
		}
		*n.set, info.Scopes = scope, append(slices.Clip(info.Scopes), scope)
	}
	// read adds the budgets of scope to *to; found is false for a scope
	// with none.
	read := func(scope string, to *[]events.BudgetView) (found, ok bool) {
		v, err := cl.GetScopeBudgets(ctx, scope)
		switch {
		case errors.Is(err, client.ErrNotFound):
			return false, true
		case err != nil:
			(&callError{status: http.StatusServiceUnavailable, typ: "server_error", code: "ledger_unavailable",
				msg: "spendgate: the ledger did not answer the budgets of " + scope}).write(w, kind)
			return false, false
		}
		*to = append(*to, v.Budgets...)
		return true, true
	}
	var kinds []string
	for _, scope := range info.Scopes {
		found, ok := read(scope, &info.Budgets)
		if !ok {
			return
		}
		if !found {
			info.WithoutBudget = append(info.WithoutBudget, scope)
			if k := events.Scope(scope).Kind(); k != "" && !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
	}
	for _, k := range kinds {
		if _, ok := read(k+":*", &info.Defaults); !ok {
			return
		}
	}
	writeJSON(w, info)
}
