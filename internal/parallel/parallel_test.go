package parallel

import (
	"flag"
	"runtime"
	"strconv"
	"testing"
)

// TestRaise: with -test.parallel not given on the command line (go test
// passes none here), Raise sets it to twice GOMAXPROCS; given, it is kept.
func TestRaise(t *testing.T) {
	f := flag.Lookup("test.parallel")
	if f == nil {
		t.Fatal("no -test.parallel flag")
	}
	before := f.Value.String()
	t.Cleanup(func() { _ = flag.Set("test.parallel", before) })
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if err := Raise(); err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(2 * runtime.GOMAXPROCS(0))
	if given {
		want = before
	}
	if got := f.Value.String(); got != want {
		t.Fatalf("-test.parallel %s, want %s (given on the command line: %v)", got, want, given)
	}
}
