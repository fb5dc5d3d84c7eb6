package dashboard

// Builds returns how many builds of the budget rows d started.
func Builds(d *Dashboard) int64 { return d.builds.Load() }
