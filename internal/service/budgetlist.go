package service

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"sort"

	"github.com/cockroachdb/apd/v3"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
)

// replyHeadroom is what a budget.list page or a report reply leaves of
// the connection's max payload for the reply's headers.
const replyHeadroom = 4 << 10

// listCursor is what a budget.list cursor encodes (base64url JSON, opaque
// to callers): the request's sort and kind, and the last entry of the page
// it follows.
type listCursor struct {
	V      int           `json:"v"`
	Sort   string        `json:"sort"`
	Kind   string        `json:"kind,omitempty"`
	Scope  events.Scope  `json:"scope"`
	Period events.Period `json:"period"`
	// Unit is the entry's BudgetRef.Unit (a budget alongside another).
	Unit string `json:"unit,omitempty"`
	// Used and Limit are the entry's utilization (sort=utilization).
	Used  string `json:"used,omitempty"`
	Limit string `json:"limit,omitempty"`
}

// listEntry is one budget in a listing, with its utilization in the
// current period as exact decimals.
type listEntry struct {
	ref         events.BudgetRef
	used, limit apd.Decimal
}

func (s *Service) budgetList(ctx context.Context, data []byte) (any, error) {
	var req events.BudgetListRequest
	if len(data) > 0 {
		if err := codec.DecodeRequest(data, &req); err != nil {
			return nil, err
		}
	}
	if req.Kind != "" {
		if err := events.ValidateToken("kind", req.Kind, events.MaxKindLen); err != nil {
			return nil, err
		}
	}
	sortBy := req.Sort
	switch sortBy {
	case "":
		sortBy = events.SortScope
	case events.SortScope, events.SortUtilization:
	default:
		return nil, events.Errorf(events.CodeInvalidRequest, "sort must be %q or %q", events.SortScope, events.SortUtilization)
	}
	limit := req.Limit
	switch {
	case limit == 0:
		limit = events.DefaultBudgetPage
	case limit < 0 || limit > events.MaxBudgetPage:
		return nil, events.Errorf(events.CodeInvalidRequest, "limit must be 1..%d", events.MaxBudgetPage)
	}
	var cur *listCursor
	if req.Cursor != "" {
		c, ok := decodeCursor(req.Cursor)
		if !ok || c.Sort != sortBy || c.Kind != req.Kind {
			return nil, events.Errorf(events.CodeInvalidRequest, "cursor is not a next_cursor of this listing (same kind and sort)")
		}
		cur = &c
	}
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	entries := s.listEntries(events.TenantFromContext(ctx), req.Kind, sortBy == events.SortUtilization, req.Retired)
	from := 0
	if cur != nil {
		ce, ok := cursorEntry(*cur)
		if !ok {
			return nil, events.Errorf(events.CodeInvalidRequest, "cursor is not a next_cursor of this listing (same kind and sort)")
		}
		from = sort.Search(len(entries), func(i int) bool { return listBefore(&ce, &entries[i], sortBy) })
	}
	page := entries[from:min(from+limit, len(entries))]
	maxBytes := int(s.nc.MaxPayload()) - replyHeadroom
	for {
		out := events.BudgetListReply{Budgets: make([]events.BudgetView, 0, len(page))}
		for _, e := range page {
			v, err := s.BudgetView(e.ref)
			if err != nil {
				return nil, err
			}
			out.Budgets = append(out.Budgets, v)
		}
		if from+len(page) < len(entries) && len(page) > 0 {
			out.NextCursor = encodeCursor(sortBy, req.Kind, &page[len(page)-1])
		}
		// A page never exceeds the max payload: halve it until it fits
		// (the rest follows through the cursor).
		b, err := json.Marshal(out)
		if err != nil || len(b) <= maxBytes || len(page) <= 1 {
			return out, err
		}
		page = page[:len(page)/2]
	}
}

// listEntries returns the budgets of tenant ("" for the untenanted ones)
// and kind ("" for all) in listing order.
func (s *Service) listEntries(tenant, kind string, byUtil, retired bool) []listEntry {
	budgets := s.l.Budgets() // by scope, then period
	entries := make([]listEntry, 0, len(budgets))
	now := s.now()
	for _, b := range budgets {
		if b.Ref.Scope.Tenant() != tenant || kind != "" && b.Ref.Scope.Local().Kind() != kind || b.Retired && !retired {
			continue
		}
		e := listEntry{ref: b.Ref}
		if byUtil {
			bal := s.l.Balance(b.Balance(now))
			setDecimal(&e.used, bal.Spent.Add(bal.Reserved).String())
			setDecimal(&e.limit, b.Limit.String())
		}
		entries = append(entries, e)
	}
	if byUtil {
		sort.SliceStable(entries, func(i, j int) bool { return listBefore(&entries[i], &entries[j], events.SortUtilization) })
	}
	return entries
}

func setDecimal(d *apd.Decimal, s string) {
	if _, _, err := d.SetString(s); err != nil {
		d.SetInt64(0) // Money's String is always a decimal; not reached
	}
}

// listBefore reports whether a comes before b in the listing order.
func listBefore(a, b *listEntry, sortBy string) bool {
	if sortBy == events.SortUtilization {
		if c := cmpUtil(a, b); c != 0 {
			return c > 0 // most used first
		}
	}
	if a.ref.Scope != b.ref.Scope {
		return a.ref.Scope < b.ref.Scope
	}
	if a.ref.Period != b.ref.Period {
		return a.ref.Period < b.ref.Period
	}
	return a.ref.Unit < b.ref.Unit
}

// cmpUtil compares used/limit of a and b exactly (see
// events.CompareUtilization).
func cmpUtil(a, b *listEntry) int {
	return events.CompareUtilization(&a.used, &a.limit, &b.used, &b.limit)
}

func encodeCursor(sortBy, kind string, e *listEntry) string {
	c := listCursor{V: 1, Sort: sortBy, Kind: kind, Scope: e.ref.Scope, Period: e.ref.Period, Unit: e.ref.Unit}
	if sortBy == events.SortUtilization {
		c.Used, c.Limit = e.used.String(), e.limit.String()
	}
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (listCursor, bool) {
	var c listCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || c.V != 1 {
		return c, false
	}
	return c, true
}

// cursorEntry is the entry a cursor names, to search the listing with.
func cursorEntry(c listCursor) (listEntry, bool) {
	e := listEntry{ref: events.BudgetRef{Scope: c.Scope, Period: c.Period, Unit: c.Unit}}
	if c.Sort == events.SortUtilization {
		if len(c.Used) > 2*events.MaxAmountLen || len(c.Limit) > 2*events.MaxAmountLen {
			return e, false
		}
		if _, _, err := e.used.SetString(c.Used); err != nil {
			return e, false
		}
		if _, _, err := e.limit.SetString(c.Limit); err != nil {
			return e, false
		}
		if e.used.Form != apd.Finite || e.limit.Form != apd.Finite {
			return e, false
		}
	}
	return e, true
}
