package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/spendgate/spendgate/internal/config"
	"github.com/spendgate/spendgate/internal/natsconn"
)

// Exit statuses of every command (the table in usage, main.go).
const (
	exitOK = 0
	// exitError: the command failed (the service refused the request, or
	// could not be reached, or a check found a problem).
	exitError = 1
	// exitDenied: admit was denied by a budget (nothing was reserved).
	exitDenied = 2
	// exitUsage: the command line was wrong (an unknown command or flag, a
	// missing required flag, a bad flag value, an unexpected argument):
	// nothing was sent. 64 is EX_USAGE of sysexits.h, so that it is never
	// mistaken for a denial.
	exitUsage = 64
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
// --help or -h (usage on stdout), exitUsage after a usage error (the error
// and the usage line on stderr).
func (c command) parse(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.printUsage(os.Stdout, fs)
			return exitOK, false
		}
		// The flag package names a flag with one dash; the docs use two.
		msg := flagPackageDash.ReplaceAllString(err.Error(), "$1--$2")
		if m := flagParseError.FindStringSubmatch(err.Error()); m != nil {
			if f := fs.Lookup(m[1]); f != nil && config.Expected(f) != "" {
				msg += ": want " + config.Expected(f)
			}
		}
		return c.usageError(fs, msg), false
	}
	if fs.NArg() > 0 {
		return c.usageError(fs, fmt.Sprintf("unexpected arguments %q", fs.Args())), false
	}
	return exitOK, true
}

// noSubcommand answers a command line that names none of c's
// subcommands: a word first is an unknown subcommand, named as such;
// --help prints c's help; flags alone are parsed for their errors, then
// question asks which subcommand.
func (c command) noSubcommand(args []string, question string) int {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return c.usageError(nil, fmt.Sprintf("unknown %s command %q", strings.TrimPrefix(c.name, "spendgate "), args[0]))
	}
	fs := newFlagSet(strings.TrimPrefix(c.name, "spendgate "))
	if code, ok := c.parse(fs, args); !ok {
		return code
	}
	return c.usageError(fs, question)
}

// flagParseError matches the flag package's error for a value its flag's
// type cannot parse, naming the flag.
var flagParseError = regexp.MustCompile(`for (?:flag )?-([a-z][a-z-]*): parse error$`)

// flagPackageDash matches a long flag as the flag package's errors name
// it, "-name" after ": ", " for " or " flag ".
var flagPackageDash = regexp.MustCompile(`(: | for | flag )-([a-z][a-z-]+)`)

// usageError prints msg, the usage line and where the rest of the help
// is on stderr, and returns exitUsage. Not the whole help: a command's
// flags run to 60 lines, which pushed the one line that says what was
// wrong off the top of the terminal.
func (c command) usageError(_ *flag.FlagSet, msg string) int {
	fmt.Fprintf(os.Stderr, "%s: %s\n\nUsage: %s\nRun '%s --help' for what it does and every flag.\n",
		c.name, msg, strings.TrimSpace(c.name+" "+c.synopsis), c.name)
	return exitUsage
}

// require returns a usage error naming the first of names whose flag is
// empty (not given, or given as ""), and false; else true. It is for the
// string flags (and repeated ones) a command cannot run without: the
// command line is refused before anything is sent.
func (c command) require(fs *flag.FlagSet, names ...string) (int, bool) {
	for _, n := range names {
		if f := fs.Lookup(n); f != nil && f.Value.String() == "" {
			return c.usageError(fs, "--"+n+" is required"), false
		}
	}
	return exitOK, true
}

// printUsage writes the synopsis, the paragraph, the command's own flags
// and then, apart, its connection flags (connectionFlags), each as --name
// (Go's flag package accepts one dash or two; the docs use two).
func (c command) printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n", strings.TrimSpace(c.name+" "+c.synopsis))
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(c.about, "\n"))
	}
	if fs == nil {
		return
	}
	isConn := func(f *flag.Flag) bool { return withConnection[fs] && connectionFlags[f.Name] }
	for _, part := range []struct {
		title string
		keep  func(*flag.Flag) bool
	}{{"Flags", func(f *flag.Flag) bool { return !isConn(f) }}, {"Connection flags", isConn}} {
		n := 0
		fs.VisitAll(func(f *flag.Flag) {
			if part.keep(f) && shorthandOf[f.Name] == "" {
				n++
			}
		})
		if n > 0 {
			fmt.Fprintf(w, "\n%s:\n", part.title)
			printFlags(w, fs, part.keep)
		}
	}
}

// registerConnection declares natsconn's connection flags on fs for o
// and marks fs as a command that connects, whose help lists them apart.
func registerConnection(fs *flag.FlagSet, o *natsconn.Options) {
	o.RegisterFlags(fs)
	withConnection[fs] = true
}

// withConnection are the flag sets registerConnection declared connection
// flags on (a command such as roles has a --prefix and --tls-* of its own,
// which are not connection flags).
var withConnection = map[*flag.FlagSet]bool{}

// connectionFlags are the flags that say how to reach the service rather
// than what to ask it: natsconn's (--nats-url, --creds, --nkey, --user,
// --password, --token, --tls-*, --inbox-prefix,
// --insecure-key-permissions), --prefix and --timeout. The help of every
// command that connects lists them apart, after the command's own flags.
var connectionFlags = func() map[string]bool {
	fs := flag.NewFlagSet("connection", flag.ContinueOnError)
	var o natsconn.Options
	o.RegisterFlags(fs)
	names := map[string]bool{"prefix": true, "timeout": true}
	fs.VisitAll(func(f *flag.Flag) { names[f.Name] = true })
	return names
}()

// outputFlag declares -o/--output on fs: json (the default: the reply) or
// id (only what, the id the command made, for a shell variable).
func outputFlag(fs *flag.FlagSet, what string) *string {
	v := &choiceFlag{value: outputJSON, choices: []string{outputJSON, outputID}}
	fs.Var(v, "output", "`json|id`: print the reply as JSON, or only "+what)
	fs.Var(v, "o", "shorthand for --output")
	return &v.value
}

// choiceFlag is a string flag that takes one of choices (a bad value is a
// usage error).
type choiceFlag struct {
	value   string
	choices []string
}

func (c *choiceFlag) String() string {
	if c == nil {
		return ""
	}
	return c.value
}

func (c *choiceFlag) Set(s string) error {
	if !slices.Contains(c.choices, s) {
		return fmt.Errorf("want %s", strings.Join(c.choices, " or "))
	}
	c.value = s
	return nil
}

// shorthandOf maps a one-letter flag to the long flag it abbreviates (they
// share one value): help prints them on one line, "-o, --output".
var shorthandOf = map[string]string{"o": "output"}

// printFlags writes every flag of fs that keep selects as "  --name TYPE"
// (a one-letter flag as "  -n"), then its usage and default, like
// flag.PrintDefaults but with two dashes.
func printFlags(w io.Writer, fs *flag.FlagSet, keep func(*flag.Flag) bool) {
	short := map[string]string{}
	for s, long := range shorthandOf {
		if fs.Lookup(s) != nil {
			short[long] = s
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !keep(f) || shorthandOf[f.Name] != "" {
			return
		}
		typ, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if len(f.Name) == 1 {
			line = "  -" + f.Name // a short flag, like -v
		}
		if s := short[f.Name]; s != "" {
			line = "  -" + s + ", --" + f.Name
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
