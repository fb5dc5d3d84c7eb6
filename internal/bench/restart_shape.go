package bench

import (
	"context"
	"fmt"

	"github.com/spendgate/spendgate/client"
	"github.com/spendgate/spendgate/events"
)

// The restart scenario's shapes (--restart-shape): how each reservation of
// the history is made. hot is an amount on one budget, the cheapest
// reservation the replica keeps; gateway is what an LLM gateway sends, a
// priced admit naming an org, a team and a user, with metadata, settled
// from usage, which the replica keeps larger (its other balances and its
// price quote beside the window's entry). What a restart costs depends on
// what the idempotency window holds, so it depends on the shape.
const (
	RestartShapeHot     = "hot"
	RestartShapeGateway = "gateway"
)

// RestartShapes are the shapes --restart-shape takes, the default first.
var RestartShapes = []string{RestartShapeHot, RestartShapeGateway}

// The gateway shape: one org (month), restartTeams teams (month) and
// restartUsers users (day), user u in team u % restartTeams; reservation i
// names the org, team i % restartTeams and user i % restartUsers, and is
// priced from restartModel: input tokens in [restartMinInput,
// restartMaxInput], restartMaxOutput output tokens at most, settled with
// its input and fewer output tokens (both from a hash of i, so the history
// is the same whatever order the callers write it in).
const (
	restartOrg       = "org:restart"
	restartTeams     = 16
	restartUsers     = 256
	restartModel     = "gpt-4o"
	restartMinInput  = 1000
	restartMaxInput  = 3000
	restartMaxOutput = 1024
	// restartPriceInput, restartPriceOutput and restartPriceCached are
	// restartModel's prices per million tokens (pricing.put).
	restartPriceInput  = "2.50"
	restartPriceOutput = "10"
	restartPriceCached = "1.25"
	// restartSeed seeds the hash that draws each reservation's tokens and
	// feature.
	restartSeed = 0x5eed_0f_9a7e
)

// restartFeatures are the metadata "feature" values of the gateway shape.
var restartFeatures = []string{"chat", "search", "summarize", "code-review"}

// gatewayShape holds the gateway shape's scopes and metadata, built once
// (the callers share them read-only).
type gatewayShape struct {
	teams, users []string
	metadata     []map[string]string // by feature
}

func newGatewayShape() *gatewayShape {
	g := &gatewayShape{}
	for t := 0; t < restartTeams; t++ {
		g.teams = append(g.teams, fmt.Sprintf("team:restart-%02d", t))
	}
	for u := 0; u < restartUsers; u++ {
		g.users = append(g.users, fmt.Sprintf("user:restart-%03d", u))
	}
	for _, f := range restartFeatures {
		g.metadata = append(g.metadata, map[string]string{"model": restartModel, "feature": f})
	}
	return g
}

// gatewayCall is reservation i of the gateway shape.
type gatewayCall struct {
	scopes        []string
	input, output int64
	metadata      map[string]string
}

// call returns reservation i.
func (g *gatewayShape) call(i int) gatewayCall {
	h := splitmix64(uint64(i) + restartSeed)
	return gatewayCall{
		scopes:   []string{restartOrg, g.teams[i%restartTeams], g.users[i%restartUsers]},
		input:    restartMinInput + int64(h%(restartMaxInput-restartMinInput+1)),
		output:   1 + int64((h>>24)%(restartMaxOutput-1)), // 1..restartMaxOutput-1
		metadata: g.metadata[(h>>48)%uint64(len(restartFeatures))],
	}
}

// admit is the call's admit: its maximum cost, priced by the replica.
func (c gatewayCall) admit() events.AdmitRequest {
	return events.AdmitRequest{Scopes: c.scopes, Model: restartModel, InputTokens: c.input, MaxOutputTokens: restartMaxOutput, Metadata: c.metadata}
}

// usage is what the call used: its input, and less output than it could.
func (c gatewayCall) usage() events.Usage {
	return events.Usage{InputTokens: c.input, OutputTokens: c.output}
}

// splitmix64 is a well-mixed hash of x (SplitMix64's finalizer).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// gatewayBudgets are the gateway shape's budgets: the org and the teams
// by month, the users by day, none ever denying.
func (g *gatewayShape) budgets() []events.BudgetPutRequest {
	put := func(scope string, p events.Period) events.BudgetPutRequest {
		return events.BudgetPutRequest{Scope: scope, Period: string(p), Limit: benchBigLimit, Unit: "USD"}
	}
	out := []events.BudgetPutRequest{put(restartOrg, events.PeriodMonth)}
	for _, t := range g.teams {
		out = append(out, put(t, events.PeriodMonth))
	}
	for _, u := range g.users {
		out = append(out, put(u, events.PeriodDay))
	}
	return out
}

// gatewayPrice is restartModel's price.
func gatewayPrice() events.PricingPutRequest {
	return events.PricingPutRequest{Model: restartModel, Unit: "USD", Input: restartPriceInput, Output: restartPriceOutput, CachedInput: restartPriceCached}
}

// gatewayCycle is one caller's cycle of the gateway shape: reservation i
// admitted priced, settled from its usage.
func gatewayCycle(ctx context.Context, cl *client.Client, c gatewayCall) error {
	res, err := cl.Admit(ctx, c.admit())
	if err != nil {
		return fmt.Errorf("admit: %w", err)
	}
	cr, err := res.SettleUsage(ctx, c.usage())
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	if cr.Status != events.StatusSettled {
		return fmt.Errorf("settle: status %q", cr.Status)
	}
	return nil
}
