//go:build race

package projector_test

// exportRace: the race detector slows the export about tenfold.
const exportRace = true
