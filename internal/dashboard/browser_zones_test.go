package dashboard_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// shownRow is what the page shows of one budget, and whether each of its
// numbers is inside the viewport (visible without scrolling sideways).
type shownRow struct {
	Scope    string `json:"scope"`
	Instance string `json:"instance"`
	Pct      string `json:"pct"`
	Spent    string `json:"spent"`
	Reserved string `json:"reserved"`
	Limit    string `json:"limit"`
	Avail    string `json:"available"`
	Resets   string `json:"resets"`
	// Hidden names the cells that are not wholly inside the viewport.
	Hidden []string `json:"hidden"`
}

const readShown = `(() => {
	const vw = document.documentElement.clientWidth;
	const inView = (e) => { if (!e) return false; const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= vw + 0.5; };
	return Array.from(document.querySelectorAll('#budgets tbody tr')).map(tr => {
		const cells = {pct: tr.querySelector('.pct'), spent: tr.querySelector('.spent'), reserved: tr.querySelector('.reserved'),
			limit: tr.querySelector('.limit'), available: tr.querySelector('.available'), resets: tr.querySelector('.resets')};
		const text = (e) => e ? e.textContent : "(none)";
		return {scope: tr.dataset.scope, instance: text(tr.querySelector('.instance')), pct: text(cells.pct),
			spent: text(cells.spent), reserved: text(cells.reserved), limit: text(cells.limit && cells.limit.firstChild),
			available: text(cells.available), resets: text(cells.resets),
			hidden: Object.entries(cells).filter(([k, e]) => !inView(e)).map(([k]) => k)};
	});
})()`

// shownMoney is the page's format of a ledger amount: two decimals at
// least (no amount here reaches a thousand).
func shownMoney(v string) string {
	i, f, _ := strings.Cut(v, ".")
	for len(f) < 2 {
		f += "0"
	}
	return i + "." + f
}

// TestDashboard_BrowserZones: a daily budget in Pacific/Kiritimati (UTC+14)
// and one in America/New_York, on the replica's clock, across each one's
// local midnight, in a real Chromium at 1400 and at 400 px wide: the page
// shows each budget's current instance in its zone with the numbers the
// ledger's budget.get answers, and its reset in its zone; at 400 px every
// number is visible without scrolling sideways (before the stacked
// layout, the table scrolled and hid the amounts and percentages).
func TestDashboard_BrowserZones(t *testing.T) {
	ctx, problems := browser(t, 1400, 1000)
	c := startClocked(t, "2026-12-01T04:30:00Z") // New York 11-30 23:30, Kiritimati 12-01 18:30
	c.define(t, "team:kiri", "day", "10", "Pacific/Kiritimati")
	c.define(t, "team:ny", "day", "10", "America/New_York")
	require.True(t, c.admit(t, "kiri-1", "team:kiri", "1.25", "1.25").Admitted)
	require.True(t, c.admit(t, "ny-1", "team:ny", "2.5", "").Admitted)
	require.NoError(t, chromedp.Run(ctx, cdplog.Enable()))

	dir := artifactDir(t)
	step := func(name string, resets map[string]string) {
		t.Helper()
		// The ledger's answer, on the replica's clock.
		want := map[string]events.BudgetView{}
		for scope := range resets {
			var got events.BudgetView
			request(t, c.env, "budget.get", events.BudgetGetRequest{Scope: scope, Period: "day"}, &got)
			want[scope] = got
		}
		for _, width := range []int64{1400, 400} {
			var rows []shownRow
			var scrollW, clientW int64
			var png []byte
			require.NoError(t, chromedp.Run(ctx,
				chromedp.EmulateViewport(width, 1000),
				chromedp.Navigate(c.srv.URL+"/dashboard/"),
				chromedp.WaitVisible(`body[data-loaded="true"]`),
				chromedp.Evaluate(readShown, &rows),
				chromedp.Evaluate(`document.documentElement.scrollWidth`, &scrollW),
				chromedp.Evaluate(`document.documentElement.clientWidth`, &clientW),
				chromedp.FullScreenshot(&png, 100),
			))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "dashboard-zones-"+name+"-"+itoa(width)+".png"), png, 0o644))
			require.Len(t, rows, len(want), "%s at %d px", name, width)
			for _, r := range rows {
				w := want[r.Scope]
				require.Equal(t, w.Instance, r.Instance, "%s at %d px: %s's instance", name, width, r.Scope)
				require.Equal(t, shownMoney(w.Spent), r.Spent, "%s at %d px: %s's spent", name, width, r.Scope)
				require.Equal(t, shownMoney(w.Reserved), r.Reserved, "%s at %d px: %s's reserved", name, width, r.Scope)
				require.Equal(t, shownMoney(w.Limit), r.Limit, "%s at %d px: %s's limit", name, width, r.Scope)
				require.Equal(t, shownMoney(w.Available), r.Avail, "%s at %d px: %s's available", name, width, r.Scope)
				require.Equal(t, resets[r.Scope], r.Resets, "%s at %d px: %s's reset, in its zone", name, width, r.Scope)
				require.Empty(t, r.Hidden, "%s at %d px: %s's numbers outside the viewport", name, width, r.Scope)
			}
			require.LessOrEqual(t, scrollW, clientW, "%s at %d px: the page scrolls sideways", name, width)
		}
	}
	step("before-ny-midnight", map[string]string{"team:kiri": "2026-12-02 00:00 +14", "team:ny": "2026-12-01 00:00 EST"})

	// New York's midnight (05:00Z): its new day holds nothing of the old one.
	c.set(t, "2026-12-01T05:30:00Z")
	require.True(t, c.admit(t, "ny-2", "team:ny", "3", "").Admitted)
	step("after-ny-midnight", map[string]string{"team:kiri": "2026-12-02 00:00 +14", "team:ny": "2026-12-02 00:00 EST"})

	// Kiritimati's midnight (10:00Z): its 2026-12-02 starts empty.
	c.set(t, "2026-12-01T10:30:00Z")
	require.True(t, c.admit(t, "kiri-2", "team:kiri", "0.75", "").Admitted)
	step("after-kiri-midnight", map[string]string{"team:kiri": "2026-12-03 00:00 +14", "team:ny": "2026-12-02 00:00 EST"})

	require.Empty(t, problems(), "console errors")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
