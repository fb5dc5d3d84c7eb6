package service

import (
	"context"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/ledger"
	"github.com/spendgate/spendgate/streams"
)

// addTenantLimitsEndpoints registers the tenant limits endpoints: put and
// list on their plain subjects only (the deployment's administration sets
// a tenant's limits, never the tenant), get on both, so that a tenant reads
// its own limits and where it stands.
func (s *Service) addTenantLimitsEndpoints(add func(name, desc string, h handler, bh batchHandler, single string, tenants bool) error) error {
	for _, e := range []struct {
		name, desc string
		h          handler
		tenants    bool
	}{
		{streams.EndpointTenantLimitsPut, "set a tenant's own limits (open reservations, budgets from defaults, its own budgets, request rate, denial bytes) in the ledger", s.tenantLimitsPut, false},
		{streams.EndpointTenantLimitsGet, "read a tenant's own limits kept in the ledger, what this replica holds it to, and where it stands", s.tenantLimitsGet, false},
		{streams.EndpointTenantLimitsGet, "a tenant's own limits, what this replica holds it to, and where it stands", s.tenantLimitsGet, true},
		{streams.EndpointTenantLimitsList, "list every tenant with limits kept in the ledger", s.tenantLimitsList, false},
	} {
		if err := add(e.name, e.desc, e.h, nil, "", e.tenants); err != nil {
			return err
		}
	}
	return nil
}

// tenantLimitsPut sets a tenant's own limits: one tenant.limits.defined.v1
// event.
func (s *Service) tenantLimitsPut(ctx context.Context, data []byte) (any, error) {
	var req events.TenantLimitsPutRequest
	if err := codec.DecodeRequest(data, &req); err != nil {
		return nil, err
	}
	if err := events.ValidateTenant(req.Tenant); err != nil {
		return nil, err
	}
	v := req.Values()
	if err := v.Validate(); err != nil {
		return nil, err
	}
	ch, err := s.l.DefineTenantLimits(ctx, req.Tenant, v, s.now())
	if err != nil {
		return nil, err
	}
	// Created: the tenant has limits of its own in the ledger now, and had
	// none before (never, or removed).
	out := events.TenantLimitsPutReply{TenantLimitsView: TenantLimitsView(ch.Limits), Created: !ch.Existed && !ch.Limits.Empty(), Changed: ch.Changed}
	if ch.Existed && len(ch.Changed) > 0 {
		prev := TenantLimitsView(ch.Prev)
		out.Previous = &prev
	}
	return out, nil
}

// TenantLimitsView is t on the wire.
func TenantLimitsView(t ledger.TenantLimits) events.TenantLimitsView {
	return events.TenantLimitsView{Tenant: t.Tenant, TenantLimitValues: t.TenantLimitValues, Version: t.Version}
}

// tenantLimitsGet reads one tenant's own limits (read-your-writes: it
// syncs first). A tenant without limits in the ledger is answered with
// none set and version 0: it is held to the common limits (or to its
// --tenant-limits line, which only the replica knows).
func (s *Service) tenantLimitsGet(ctx context.Context, data []byte) (any, error) {
	var req events.TenantLimitsGetRequest
	if len(data) > 0 {
		if err := codec.DecodeRequest(data, &req); err != nil {
			return nil, err
		}
	}
	if own := events.TenantFromContext(ctx); own != "" {
		// A tenant reads its own limits only.
		if req.Tenant != "" && req.Tenant != own {
			return nil, events.Errorf(events.CodeInvalidRequest, "tenant %s reads its own limits only, not %s's", own, req.Tenant)
		}
		req.Tenant = own
	}
	if req.Tenant == "" {
		return nil, events.Errorf(events.CodeInvalidIdentifier, "tenant is empty: name the tenant (\"tenant\", --tenant); a tenant's own login reads its own without it")
	}
	if err := events.ValidateTenant(req.Tenant); err != nil {
		return nil, err
	}
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	t, ok := s.l.TenantLimitsOf(req.Tenant)
	if !ok {
		t = ledger.TenantLimits{Tenant: req.Tenant}
	}
	v := TenantLimitsView(t)
	held := s.HeldTo(req.Tenant)
	held.Replica = s.svc.Info().ID
	v.HeldTo = &held
	v.Usage = &events.TenantUsage{OpenReservations: s.l.TenantOpen(req.Tenant), DefaultBudgets: s.l.TenantDefaultBudgets(req.Tenant),
		Budgets: s.l.TenantBudgets(req.Tenant)}
	return v, nil
}

// HeldTo is every limit tenant is held to on this replica, and where each
// comes from: its own (the ledger's, or this replica's file) in place of
// the common ones (the admitter's two, the service's others). Replica is
// left empty.
func (s *Service) HeldTo(tenant string) events.TenantHeldTo {
	common := s.limits
	a := s.a.Limits()
	common.MaxOpen, common.MaxDefaultBudgets = a.MaxOpen, a.MaxDefaultBudgets
	// One read of the table, so that the limits and their sources are of
	// one revision even while the fold replaces it.
	own, hasOwn := s.own.Get(tenant)
	l := common
	if hasOwn {
		l = own.over(common)
	}
	src := own.Source
	if src == "" {
		src = "--tenant-limits"
	}
	n := func(v int) int64 { return int64(max(v, 0)) }
	out := events.TenantHeldTo{MaxOpen: n(l.MaxOpen), MaxDefaultBudgets: n(l.MaxDefaultBudgets), MaxBudgets: n(l.MaxBudgets), Rate: n(l.Rate),
		DenialBytes: n(l.DenialBytes), From: map[string]string{}}
	if l.Rate > 0 {
		out.Burst = n(l.Burst)
	}
	for _, f := range []struct {
		name, flag string
		own        bool
	}{
		{"max_open", "max-open", own.MaxOpen != 0},
		{"max_default_budgets", "max-default-budgets", own.MaxDefaultBudgets != 0},
		{"max_budgets", "max-budgets", own.MaxBudgets != 0},
		{"rate", "rate", own.Rate != 0},
		{"burst", "burst", own.Rate != 0 || own.Burst != 0},
		{"denial_bytes", "denial-bytes", own.DenialBytes != 0},
	} {
		if hasOwn && f.own {
			out.From[f.name] = src
		} else {
			out.From[f.name] = "serve --tenant-" + f.flag
		}
	}
	return out
}

// tenantLimitsList lists every tenant with limits kept in the ledger,
// sorted by tenant.
func (s *Service) tenantLimitsList(ctx context.Context, data []byte) (any, error) {
	var req events.TenantLimitsListRequest
	if len(data) > 0 {
		if err := codec.DecodeRequest(data, &req); err != nil {
			return nil, err
		}
	}
	if err := s.l.Sync(ctx); err != nil {
		return nil, err
	}
	ts := s.l.AllTenantLimits()
	out := events.TenantLimitsListReply{Tenants: make([]events.TenantLimitsView, 0, len(ts))}
	for _, t := range ts {
		out.Tenants = append(out.Tenants, TenantLimitsView(t))
	}
	return out, nil
}
