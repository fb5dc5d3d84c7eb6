package secret_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/secret"
)

func newSeed(t *testing.T) (seed, pub string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	s, err := kp.Seed()
	require.NoError(t, err)
	p, err := kp.PublicKey()
	require.NoError(t, err)
	return string(s), p
}

// TestRedact: a seed, in any surrounding, and a creds file's JWT and seed
// are hidden; a public key, a path and ordinary words are kept.
func TestRedact(t *testing.T) {
	seed, pub := newSeed(t)
	akp, err := nkeys.CreateAccount()
	require.NoError(t, err)
	uc := jwt.NewUserClaims(pub)
	ujwt, err := uc.Encode(akp)
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(ujwt, []byte(seed))
	require.NoError(t, err)
	for _, in := range []string{
		seed,
		`signing: "` + seed + `" is not a public nkey`,
		"open " + seed + ": no such file or directory",
		seed[:45], // most of a seed is still a secret
		string(creds),
	} {
		out := secret.Redact(in)
		require.NotContains(t, out, seed[2:20], in)
		require.NotContains(t, out, ujwt[10:40])
		require.Contains(t, out, "redacted")
		require.True(t, secret.LooksLikeSeed(in))
	}
	for _, keep := range []string{pub, "/etc/spendgate/signing.nk", "SPENDGATE_SIGNING_SEED", "keys/r2.nk: is not a public nkey"} {
		require.Equal(t, keep, secret.Redact(keep))
		require.False(t, secret.LooksLikeSeed(keep))
	}
	base := errors.New("x " + seed)
	err = secret.Error(base)
	require.NotContains(t, err.Error(), seed)
	require.ErrorIs(t, err, base)
	require.NoError(t, secret.Error(nil))
	plain := errors.New("plain")
	require.Same(t, plain, secret.Error(plain))
}

// TestCheckFile: a seed file its group or others may read or write is
// refused, naming the fix; 0600 and 0400 are accepted; ReadFile skips the
// check when told to. A seed given as the path shows in no error.
func TestCheckFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no file modes")
	}
	seed, _ := newSeed(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "r2.nk")
	require.NoError(t, os.WriteFile(path, []byte(seed+"\n"), 0o600))
	for _, mode := range []os.FileMode{0o600, 0o400} {
		require.NoError(t, os.Chmod(path, mode))
		require.NoError(t, secret.CheckFile(path), "%o", mode)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620, 0o660} {
		require.NoError(t, os.Chmod(path, mode))
		err := secret.CheckFile(path)
		require.ErrorIs(t, err, secret.ErrTooOpen, "%o", mode)
		require.Contains(t, err.Error(), "chmod 600 "+path)
		require.Contains(t, err.Error(), secret.InsecureFlag)
		_, err = secret.ReadFile(path, false)
		require.ErrorIs(t, err, secret.ErrTooOpen)
		b, err := secret.ReadFile(path, true)
		require.NoError(t, err)
		require.Equal(t, seed+"\n", string(b))
	}
	_, err := secret.ReadFile(seed, false)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NotContains(t, err.Error(), seed[2:])
	_, err = secret.ReadFile(seed, true)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.NotContains(t, err.Error(), seed[2:])
}

// TestWriter: a log line through Writer shows no seed; other lines pass
// through unchanged, and the writer reports the bytes it was given.
func TestWriter(t *testing.T) {
	seed, pub := newSeed(t)
	var buf bytes.Buffer
	w := secret.Writer(&buf)
	line := `level=ERROR msg="signing keys" err="` + seed + ` is not a public nkey"` + "\n"
	n, err := w.Write([]byte(line))
	require.NoError(t, err)
	require.Equal(t, len(line), n)
	require.NotContains(t, buf.String(), seed[2:])
	require.Contains(t, buf.String(), "redacted")
	buf.Reset()
	_, err = w.Write([]byte(pub + "\n"))
	require.NoError(t, err)
	require.Equal(t, pub+"\n", buf.String())
}
