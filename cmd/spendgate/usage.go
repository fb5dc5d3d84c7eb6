package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit statuses of every command.
const (
	exitOK = 0
	// exitError: the command failed.
	exitError = 1
	// exitUsage: the command line was wrong (an unknown flag or command, a
	// bad flag value, an unexpected argument). admit also exits 2 when the
	// admit is denied; the message on stderr tells them apart.
	exitUsage = 2
)

// command is one (sub)command's help: its name as typed, its synopsis
// after the name, and a paragraph about it.
type command struct {
	name     string
	synopsis string
	about    string
}

// newFlagSet returns a flag set that reports nothing on its own: parse
// prints the usage.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args into fs and refuses positional arguments. When the
// command should stop it returns false and the exit status: 0 after
// --help or -h (usage on stdout), 2 after a usage error (the error and the
// usage on stderr).
func (c command) parse(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.printUsage(os.Stdout, fs)
			return exitOK, false
		}
		// The flag package names a flag with one dash; the docs use two.
		msg := strings.Replace(err.Error(), "defined: -", "defined: --", 1)
		return c.usageError(fs, msg), false
	}
	if fs.NArg() > 0 {
		return c.usageError(fs, fmt.Sprintf("unexpected arguments %q", fs.Args())), false
	}
	return exitOK, true
}

// usageError prints msg and the usage on stderr and returns exitUsage.
func (c command) usageError(fs *flag.FlagSet, msg string) int {
	fmt.Fprintf(os.Stderr, "%s: %s\n\n", c.name, msg)
	c.printUsage(os.Stderr, fs)
	return exitUsage
}

// printUsage writes the synopsis, the paragraph and the flags, each as
// --name (Go's flag package accepts one dash or two; the docs use two).
func (c command) printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n", strings.TrimSpace(c.name+" "+c.synopsis))
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.about, "\n"))
	}
	if fs == nil {
		return
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintf(w, "\nFlags:\n")
	printFlags(w, fs)
}

// printFlags writes every flag of fs as "  --name TYPE" (a one-letter
// flag as "  -n"), then its usage and default, like flag.PrintDefaults but
// with two dashes.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if len(f.Name) == 1 {
			line = "  -" + f.Name // a short flag, like -v
		}
		if typ != "" {
			line += " " + typ
		}
		fmt.Fprintln(w, line)
		def := ""
		switch {
		case f.DefValue == "" || f.DefValue == "false" || f.DefValue == "0" || f.DefValue == "0s":
		case typ == "string":
			def = fmt.Sprintf(" (default %q)", f.DefValue)
		default:
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "    \t%s%s\n", strings.ReplaceAll(usage, "\n", "\n    \t"), def)
	})
}
