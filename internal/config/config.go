package config

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts the name of every environment variable Apply reads (of
// the flags EnvFlags lists).
const EnvPrefix = "SPENDGATE_"

// FileFlag is the name of the flag that names the config file.
const FileFlag = "config"

// MaxFileBytes caps the size of a config file.
const MaxFileBytes = 1 << 20

// AddFileFlag declares --config on fs.
func AddFileFlag(fs *flag.FlagSet) *string {
	return fs.String(FileFlag, "", "read settings from this file: 'flag-name = value' lines")
}

// EnvName returns the environment variable Apply reads for the flag named
// name: "data-dir" -> "SPENDGATE_DATA_DIR".
func EnvName(name string) string {
	return EnvPrefix + strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(name))
}

// Env is the set of flags of one command that may come from the
// environment, made by EnvFlags.
type Env struct {
	// names maps each listed flag to its variable.
	names map[string]string
}

// EnvFlags lists the flags of fs, by name, that Apply may set from their
// environment variable (EnvName): a per-command whitelist, so that no other
// SPENDGATE_* variable acts on the command (an earlier build silently took
// a harness's own SPENDGATE_REPLICAS=2 as serve --replicas 2). Each listed
// flag's usage gains its variable ("($SPENDGATE_DATA_DIR)") unless it names
// it already, so the command's --help lists every variable it reads. Call
// it after declaring the flags and before parsing; a name fs does not
// declare panics (a programming error).
func EnvFlags(fs *flag.FlagSet, names ...string) Env {
	e := Env{names: map[string]string{}}
	for _, n := range names {
		e.set(fs, n, EnvName(n))
	}
	return e
}

// As makes the flag named name, which e lists, read the variable
// variable instead of its EnvName: for a flag whose name means something
// else in another command (gateway --listen is an HTTP address, serve's is
// NATS's), so that one environment can hold both. Ignored then names its
// EnvName when set.
func (e Env) As(fs *flag.FlagSet, name, variable string) {
	if _, ok := e.names[name]; !ok {
		panic(fmt.Sprintf("config: Env.As: %s does not list %q", fs.Name(), name))
	}
	f := fs.Lookup(name)
	f.Usage = strings.Replace(f.Usage, " ($"+e.names[name]+")", "", 1)
	e.set(fs, name, variable)
}

func (e Env) set(fs *flag.FlagSet, name, variable string) {
	f := fs.Lookup(name)
	if f == nil {
		panic(fmt.Sprintf("config: EnvFlags: %s has no flag %q", fs.Name(), name))
	}
	e.names[name] = variable
	if v := "$" + variable; !strings.Contains(f.Usage, v) {
		f.Usage += " (" + v + ")"
	}
}

// Names returns the environment variables e reads, sorted.
func (e Env) Names() []string {
	out := make([]string, 0, len(e.names))
	for _, v := range e.names {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Ignored returns the variables set in the environment that name a flag of
// fs (by EnvName) that e does not read (it does not list the flag, or
// reads it from another variable: As), sorted: settings the command does
// not take from the environment (worth a warning).
func (e Env) Ignored(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		if e.names[f.Name] == EnvName(f.Name) {
			return
		}
		if v, ok := os.LookupEnv(EnvName(f.Name)); ok && v != "" {
			out = append(out, EnvName(f.Name))
		}
	})
	sort.Strings(out)
	return out
}

// Apply fills every flag of fs that was not set on the command line: from
// its environment variable (EnvName) when env lists the flag and the
// variable is set and not empty, else from the config file's line for it,
// else the flag keeps its default. The config file is the value of the
// flag FileFlag ("config") after the command line and the environment, if
// fs has such a flag and it is not empty. Call it after fs.Parse.
//
// Errors, in the order they are checked: a variable whose value the flag
// rejects (naming the variable); the file cannot be read; a line that is
// not "key = value", a key that is not a flag of fs, a key given twice, the
// key "config" itself, or a value the flag rejects (naming the file, the
// line and the key). Every key of the file is checked, including those the
// command line or the environment override. On error some flags may
// already have been set.
func Apply(fs *flag.FlagSet, env Env) error {
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })

	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := env.names[f.Name]
		if err != nil || explicit[f.Name] || name == "" {
			return
		}
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("config: $%s: %w", name, setError(fs, f.Name, e))
			return
		}
		explicit[f.Name] = true
	})
	if err != nil {
		return err
	}

	ff := fs.Lookup(FileFlag)
	if ff == nil || ff.Value.String() == "" {
		return nil
	}
	return applyFile(fs, ff.Value.String(), explicit)
}

func applyFile(fs *flag.FlagSet, path string, explicit map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > MaxFileBytes {
		return fmt.Errorf("config: %s is larger than %d bytes", path, MaxFileBytes)
	}
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), MaxFileBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			return fmt.Errorf("config: %s:%d: expected 'key = value', got %q", path, n, line)
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if key == "" {
			return fmt.Errorf("config: %s:%d: missing key before '='", path, n)
		}
		if key == FileFlag {
			return fmt.Errorf("config: %s:%d: key %q: a config file cannot name another", path, n, key)
		}
		if fs.Lookup(key) == nil {
			return fmt.Errorf("config: %s:%d: unknown key %q (not a flag of %s)", path, n, key, fs.Name())
		}
		if prev, dup := seen[key]; dup {
			return fmt.Errorf("config: %s:%d: key %q already set on line %d", path, n, key, prev)
		}
		seen[key] = n
		if strings.HasPrefix(value, `"`) {
			uq, err := strconv.Unquote(value)
			if err != nil {
				return fmt.Errorf("config: %s:%d: key %q: value %s is not a complete double-quoted string", path, n, key, value)
			}
			value = uq
		}
		if explicit[key] {
			continue
		}
		if err := fs.Set(key, value); err != nil {
			return fmt.Errorf("config: %s:%d: key %q: %w", path, n, key, setError(fs, key, err))
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("config: %s: a line is longer than %d bytes", path, MaxFileBytes)
		}
		return fmt.Errorf("config: %s: %w", path, err)
	}
	return nil
}

// Expected says what a value of flag f must look like, for an error that
// would otherwise say only "parse error": "a duration such as 5s, 1m or
// 1h30m", "true or false", "a whole number" (or "" for a string value,
// whose own Set explains itself).
func Expected(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration such as 5s, 1m or 1h30m"
	case bool:
		return "true or false"
	case int, int64:
		return "a whole number"
	case uint, uint64:
		return "a whole number, 0 or more"
	case float64:
		return "a number"
	}
	return ""
}

// setError is err of setting flag name of fs, with what its value must
// look like when err says no more than that it could not be parsed.
func setError(fs *flag.FlagSet, name string, err error) error {
	if f := fs.Lookup(name); f != nil && strings.HasSuffix(err.Error(), "parse error") {
		if want := Expected(f); want != "" {
			return fmt.Errorf("%w: want %s", err, want)
		}
	}
	return err
}
