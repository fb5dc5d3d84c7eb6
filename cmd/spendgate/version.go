package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

var versionCommand = command{
	name:     "spendgate version",
	synopsis: "",
	about:    "Prints the module version, the commit the binary was built from and the Go version.",
}

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
	if err := writeVersion(os.Stdout, info); err != nil {
		fmt.Fprintln(os.Stderr, "spendgate version:", err)
		return 1
	}
	return 0
}

// writeVersion writes the module version, the VCS commit (and whether the
// tree was modified), the commit time and the Go version, one per line.
func writeVersion(w io.Writer, info *debug.BuildInfo) error {
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	commit := settings["vcs.revision"]
	switch {
	case commit == "":
		commit = "unknown (built without version control information)"
	case settings["vcs.modified"] == "true":
		commit += " (modified)"
	}
	when := settings["vcs.time"]
	if when == "" {
		when = "unknown"
	}
	_, err := fmt.Fprintf(w, "spendgate %s\nmodule %s\ncommit %s\ncommit time %s\ngo %s %s/%s\n",
		info.Main.Version, info.Main.Path, commit, when, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

// buildVersion and buildCommit are the module version and VCS commit of
// this binary, for spendgate_build_info; "unknown" when not recorded.
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
	return "unknown"
}
