// Package parallel raises how many parallel tests a test binary runs at
// once, for packages whose parallel tests spend much of their time waiting
// (on their own servers, processes or clocks) rather than computing.
package parallel

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// Raise sets -test.parallel to twice GOMAXPROCS unless the command line
// gives it. Call it from TestMain before m.Run: it parses the flags.
func Raise() error {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if set {
		return nil
	}
	return flag.Set("test.parallel", strconv.Itoa(2*runtime.GOMAXPROCS(0)))
}

// Main is a whole TestMain: Raise, then m.Run, then each of after (the
// package's own cleanups), exiting with m.Run's code (2 if the flag
// cannot be set).
func Main(m *testing.M, after ...func()) {
	if err := Raise(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	for _, f := range after {
		f()
	}
	os.Exit(code)
}
