//go:build race

package report_test

// exportRace: the race detector slows the export about tenfold.
const exportRace = true
