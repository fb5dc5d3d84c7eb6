// Package dashboard serves spendgate's read-only spend dashboard on the
// operator HTTP listener (serve --http ADDR, then open /dashboard/).
//
// The page lists every budget in the ledger's current period instance of
// it (in the budget's time zone) with its limit, spent, reserved, a
// utilization bar, its burn rate, when it runs out at that pace or that it
// is exhausted, and when it resets in its zone (sortable, filterable, the
// nearest to its limit first; under 640 px wide each budget is a card with
// every number labelled), charts one budget's spend over time with the
// forecast, and lists the replica's recent denials with their reasons.
// The burn rate decays when the budget is idle (PaceHalfLife, PaceWindow);
// a budget is exhausted when nothing is available or the latest call it
// denied would still not fit (Forecast.Exhausted). docs/dashboard.md
// explains every number. Its assets are embedded (go:embed): no build step, no
// external network, no script from a CDN; the chart is hand-written SVG.
//
// Data comes from small JSON endpoints under the same listener:
//
//	GET /dashboard/api/budgets   budgets in their current period instance, nearest
//	                             their limit first, a page at a time (?limit=, ?cursor=)
//	GET /dashboard/api/series?scope=S&period=P   one budget's spend over time
//	GET /dashboard/api/denials   this replica's recent denials, newest first
//	GET /dashboard/api/shadow    the last 24 h of check and shadow decisions by
//	                             scope (every replica's: the report of the denial
//	                             stream), apart from spend
//
// Each takes an optional tenant=NAME: then only that tenant's budgets and
// denials, and series' scope is as the tenant names it (tenant= with no
// name: the untenanted deployment's only). Without it the operator sees
// every tenant's, a tenant's scope carrying its tenant ("acme/team:search").
//
// Numbers are the replica's fold of the ledger (what budget.list answers).
// Time series are report.Series, a reader the replica's one fold feeds
// (it travels in the replica's snapshots): for each budget the points of
// its current period instance, at most MaxPoints, downsampled (halved) as
// they grow, so memory is bounded by budgets x MaxPoints whatever the
// traffic. The dashboard opens no consumer of its own. Denials are not in
// the ledger (a denial writes nothing): each replica keeps its last
// MaxDenials denial records in memory, so the list is per replica and
// empty after a restart.
//
// Money never touches float on the server: amounts are decimal strings,
// utilization is integer basis points of the limit, and the forecast is
// computed with exact decimals. The page uses numbers only to place pixels.
package dashboard
