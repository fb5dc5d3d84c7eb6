package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

var versionCommand = command{
	name:     "spendgate version",
	synopsis: "",
	about: `Prints what the binary knows of its build: the module version, the commit
and its time, and the Go version. A commit is known only if the build
recorded it: go build in a git checkout does (go version -m shows it as
vcs.revision), go run and a build with -buildvcs=false do not, and neither
does a build in a git worktree or from the module cache (go install
...@version: the module version names the source then). Such a build may
stamp it itself: go build -ldflags "-X main.commit=$(git rev-parse HEAD)".`,
}

// commit is the commit the binary was built from when the build stamps it
// itself (-ldflags "-X main.commit=..."); the VCS information Go records
// takes precedence.
var commit string

// noCommit is the commit line of a binary that knows no commit.
const noCommit = "unknown: built without VCS information (go run records none; use go build in a git checkout, or -ldflags \"-X main.commit=$(git rev-parse HEAD)\")"

// versionCmd is spendgate version.
func versionCmd(args []string) int {
	fs := newFlagSet("version")
	if code, ok := versionCommand.parse(fs, args); !ok {
		return code
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(os.Stderr, "spendgate version: the binary carries no build information")
		return 1
	}
	if err := writeVersion(os.Stdout, info, commit); err != nil {
		fmt.Fprintln(os.Stderr, "spendgate version:", err)
		return 1
	}
	return 0
}

// writeVersion writes the module version, the commit (and whether the tree
// was modified) and its time as far as the build recorded them, and the Go
// version, one per line. stamped is the -ldflags commit, used when the
// build recorded none.
func writeVersion(w io.Writer, info *debug.BuildInfo, stamped string) error {
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	rev := settings["vcs.revision"]
	switch {
	case rev != "" && settings["vcs.modified"] == "true":
		rev += " (modified)"
	case rev == "" && stamped != "":
		rev = stamped + " (stamped with -ldflags)"
	case rev == "":
		rev = noCommit
	}
	var b strings.Builder
	fmt.Fprintf(&b, "spendgate %s\nmodule %s\ncommit %s\n", info.Main.Version, info.Main.Path, rev)
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "commit time %s\n", t)
	}
	fmt.Fprintf(&b, "go %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	_, err := io.WriteString(w, b.String())
	return err
}

// buildVersion and buildCommit are the module version and commit of this
// binary, for spendgate_build_info; "unknown" when not recorded.
func buildVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "unknown"
}

func buildCommit() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	if commit != "" {
		return commit
	}
	return "unknown"
}
