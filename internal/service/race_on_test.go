//go:build race

package service_test

// raceEnabled: the tests run under the race detector, which slows every
// step several times over (timings then measure it, not the service).
const raceEnabled = true
