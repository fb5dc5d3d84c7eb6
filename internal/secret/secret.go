// Package secret keeps private keys out of messages and off files that
// others can read.
//
// Redact removes anything that looks like an nkey seed ("SU...", "SA...",
// "SO...": what signs revisions and authenticates NATS users) or a user JWT
// from a string before it reaches an error, a log line or a panic. CheckFile
// refuses a seed or credentials file that its group or others may read or
// write, as ssh refuses such a private key.
package secret

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
)

// seedLike matches an nkey seed, and anything long enough to be most of one:
// at the start of a word, 'S', then the key type, then base32. Public keys
// start with another letter (U, A, O, N, C, P, X), so they are left alone.
var seedLike = regexp.MustCompile(`\bS[A-Z2-7]{39,}`)

// jwtLike matches a JWT (a creds file's first half): three base64url
// fields, the first one a JSON object.
var jwtLike = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*`)

// Redacted is what Redact puts in place of a seed, after its first two
// characters (the seed's kind, "SU" for a user).
const Redacted = "...(nkey seed, redacted)"

// Redact returns s with every nkey seed, or run that could be most of one,
// replaced by its first two characters and Redacted, and every JWT by
// "(jwt, redacted)".
func Redact(s string) string {
	s = seedLike.ReplaceAllStringFunc(s, func(m string) string { return m[:2] + Redacted })
	return jwtLike.ReplaceAllString(s, "(jwt, redacted)")
}

// LooksLikeSeed reports whether s holds something Redact would hide as a
// seed.
func LooksLikeSeed(s string) bool { return seedLike.MatchString(s) }

// Error returns err with Redact applied to its message; errors.Is and
// errors.As still see err. Nil stays nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := Redact(msg); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// ErrTooOpen: a seed or credentials file that its group or others may
// access. CheckFile's errors wrap it.
var ErrTooOpen = errors.New("secret: key file permissions are too open")

// InsecureFlag is the command line flag that accepts such files anyway.
const InsecureFlag = "--insecure-key-permissions"

// CheckFile refuses the seed or credentials file at path if its group or
// others have any permission on it (mode & 0o077), as ssh refuses a private
// key: whoever can read it can sign or log in as its owner, and whoever can
// write it can replace the key. The error wraps ErrTooOpen and says how to
// fix it (chmod 600, or InsecureFlag). Errors from stat are returned as they
// are (wrapped, with the path redacted). On Windows, whose files carry no
// such mode, it checks nothing.
func CheckFile(path string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return Error(err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		p := Redact(path)
		return fmt.Errorf("%w: %s has mode %04o, which lets its group or others use it: a seed or creds file must be readable by its owner alone (chmod 600 %s), or pass %s", ErrTooOpen, p, perm, p, InsecureFlag)
	}
	return nil
}

// ReadFile reads the seed or credentials file at path after CheckFile
// (unless insecure is set). Its errors carry no seed: not even a path that
// is one (a seed given where a file name belongs).
func ReadFile(path string, insecure bool) ([]byte, error) {
	if !insecure {
		if err := CheckFile(path); err != nil {
			return nil, err
		}
	}
	b, err := os.ReadFile(path)
	return b, Error(err)
}

// Writer returns a writer that Redacts what it passes to w. A log handler
// that writes each record with one Write (log/slog's do) never splits a
// seed across two writes.
func Writer(w io.Writer) io.Writer { return redactingWriter{w} }

type redactingWriter struct{ w io.Writer }

func (r redactingWriter) Write(p []byte) (int, error) {
	if !seedLike.Match(p) && !jwtLike.Match(p) {
		return r.w.Write(p)
	}
	if _, err := io.WriteString(r.w, Redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
