package signing_test

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/secret"
	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenSeed is a fixed test key: Ed25519 is deterministic, so the same
// seed, key and payload always give the same headers.
const goldenSeed = "SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4"

func goldenSigner(t *testing.T) *signing.Signer {
	t.Helper()
	s, err := signing.NewSigner([]byte(goldenSeed))
	require.NoError(t, err)
	return s
}

// TestSign_Golden freezes the header form of a signature: the header
// names, the public key, and the base64url signature over the domain, the
// key and the payload. A change here breaks every stored signature.
func TestSign_Golden(t *testing.T) {
	s := goldenSigner(t)
	payload, err := os.ReadFile("../../events/testdata/lane.v2.json")
	require.NoError(t, err)
	h := nats.Header{}
	s.Sign(h, "lane.0", payload)
	got := streams.HeaderSigKey + ": " + h.Get(streams.HeaderSigKey) + "\n" + streams.HeaderSig + ": " + h.Get(streams.HeaderSig) + "\n"
	path := filepath.Join("testdata", "lane.v2.headers")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), got)

	// The golden headers verify with the public key alone.
	ks, err := signing.ParseKeys(s.PublicKey())
	require.NoError(t, err)
	parsed := nats.Header{}
	for _, line := range strings.Split(strings.TrimSpace(string(want)), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		parsed.Set(k, v)
	}
	require.Equal(t, signing.Reason(""), ks.Verify("lane.0", 7, parsed, payload))
	require.Equal(t, signing.ReasonBadSignature, ks.Verify("lane.1", 7, parsed, payload), "bound to its key")
	require.Equal(t, signing.ReasonBadSignature, ks.Verify("lane.0", 7, parsed, append(payload, ' ')), "bound to its payload")
}

func TestVerify_Reasons(t *testing.T) {
	s := goldenSigner(t)
	kp, err := nkeys.CreateAccount()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	other, err := signing.NewSigner(seed)
	require.NoError(t, err)
	data := []byte(`{"schema":"lane.v2"}`)
	sign := func(s *signing.Signer) nats.Header { h := nats.Header{}; s.Sign(h, "lane.0", data); return h }

	ks, err := signing.ParseKeys(s.PublicKey() + " until=10, unsigned until=3")
	require.NoError(t, err)
	require.EqualValues(t, 3, ks.UnsignedUntil())
	for _, c := range []struct {
		name string
		seq  uint64
		h    nats.Header
		want signing.Reason
	}{
		{"signed by a trusted key", 5, sign(s), ""},
		{"on the retirement sequence", 10, sign(s), ""},
		{"after its key retired", 11, sign(s), signing.ReasonUntrustedKey},
		{"by another key", 5, sign(other), signing.ReasonUntrustedKey},
		{"unsigned, before signing began", 3, nats.Header{}, ""},
		{"unsigned, after", 4, nil, signing.ReasonUnsigned},
		{"a signature that is not base64", 5, nats.Header{streams.HeaderSigKey: {s.PublicKey()}, streams.HeaderSig: {"!!"}}, signing.ReasonBadSignature},
		{"a key header without a signature", 5, nats.Header{streams.HeaderSigKey: {s.PublicKey()}}, signing.ReasonBadSignature},
	} {
		require.Equal(t, c.want, ks.Verify("lane.0", c.seq, c.h, data), c.name)
	}
	var none *signing.KeySet
	require.Equal(t, signing.Reason(""), none.Verify("lane.0", 9, nil, data), "no set: nothing verified")
}

func TestParseKeys(t *testing.T) {
	s := goldenSigner(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "trusted-keys")
	require.NoError(t, os.WriteFile(file, []byte("# the replicas' keys, all of them\n"+s.PublicKey()+" until=40\nunsigned until=7\n\n"), 0o600))
	ks, err := signing.ParseKeys(file)
	require.NoError(t, err)
	require.Equal(t, []signing.Key{{Public: s.PublicKey(), Until: 40}}, ks.Keys())
	require.Equal(t, "unsigned until=7\n"+s.PublicKey()+" until=40\n", ks.String())
	again, err := signing.ParseKeys(ks.String())
	require.NoError(t, err)
	require.Equal(t, ks.String(), again.String(), "String reads back")

	for _, bad := range []string{"", "unsigned until=4", "UNOTAKEY", s.PublicKey() + " since=3", s.PublicKey() + " until=0", filepath.Join(dir, "missing"), "unsigned"} {
		_, err := signing.ParseKeys(bad)
		require.Error(t, err, bad)
	}
}

func TestLoadOrCreate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "signing.nk")
	s, created, err := signing.LoadOrCreate(path)
	require.NoError(t, err)
	require.True(t, created)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	again, created, err := signing.LoadOrCreate(path)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, s.PublicKey(), again.PublicKey())
	_, err = signing.NewSigner([]byte(s.PublicKey()))
	require.Error(t, err, "a public key is not a seed")
}

// TestLoadSigner_Permissions: a seed file that its group or others may
// access is refused by LoadSigner and LoadOrCreate (as ssh refuses such a
// private key), naming the fix, unless AllowInsecurePermissions; a file
// LoadOrCreate makes is 0600 and loads again. On main a 0644 seed file was
// accepted silently.
func TestLoadSigner_Permissions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r2.nk")
	require.NoError(t, os.WriteFile(path, []byte(goldenSeed+"\n"), 0o644))
	for _, load := range []func(...signing.KeyFileOption) (*signing.Signer, error){
		func(o ...signing.KeyFileOption) (*signing.Signer, error) { return signing.LoadSigner(path, o...) },
		func(o ...signing.KeyFileOption) (*signing.Signer, error) {
			s, _, err := signing.LoadOrCreate(path, o...)
			return s, err
		},
	} {
		_, err := load()
		require.ErrorIs(t, err, secret.ErrTooOpen)
		require.Contains(t, err.Error(), "chmod 600 "+path)
		require.Contains(t, err.Error(), "--insecure-key-permissions")
		require.NotContains(t, err.Error(), goldenSeed[2:])
		s, err := load(signing.AllowInsecurePermissions())
		require.NoError(t, err)
		require.Equal(t, goldenSigner(t).PublicKey(), s.PublicKey())
	}
	require.NoError(t, os.Chmod(path, 0o600))
	_, err := signing.LoadSigner(path)
	require.NoError(t, err)
}

// TestSecrets_NeverPrinted: no error of a path that reads a key, and no
// formatting of a Signer, shows the seed. The flags swapped (serve
// --trusted-keys keys/r2.nk, the seed file) printed the whole seed on main
// ("SUAE...": is not a public nkey), and so did a seed given inline, a seed
// given as a file name, and a seed after a public key.
func TestSecrets_NeverPrinted(t *testing.T) {
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "r2.nk")
	require.NoError(t, os.WriteFile(seedFile, []byte(goldenSeed+"\n"), 0o600))
	pub := goldenSigner(t).PublicKey()
	listWithSeed := filepath.Join(dir, "trusted-keys")
	require.NoError(t, os.WriteFile(listWithSeed, []byte(pub+"\n"+goldenSeed+"\n"), 0o600))
	for _, spec := range []string{seedFile, goldenSeed, pub + "," + goldenSeed, pub + " " + goldenSeed, listWithSeed, pub + " until=" + goldenSeed} {
		_, err := signing.ParseKeys(spec)
		require.Error(t, err, spec)
		require.NotContains(t, err.Error(), goldenSeed[2:], spec)
		if spec != pub+" until="+goldenSeed {
			require.ErrorIs(t, err, signing.ErrSeedInTrustedKeys, spec)
		}
	}
	_, err := signing.NewKeySet([]signing.Key{{Public: goldenSeed}}, 0)
	require.ErrorIs(t, err, signing.ErrSeedInTrustedKeys)

	// A seed given where its file's name belongs.
	_, err = signing.LoadSigner(goldenSeed)
	require.Error(t, err)
	require.NotContains(t, err.Error(), goldenSeed[2:])
	_, _, err = signing.LoadOrCreate(goldenSeed)
	require.ErrorIs(t, err, signing.ErrSeedAsPath)
	_, err = os.Stat(goldenSeed)
	require.ErrorIs(t, err, os.ErrNotExist, "no file named after the seed")

	// A file that holds most of a seed, but not a valid one.
	torn := filepath.Join(dir, "torn.nk")
	require.NoError(t, os.WriteFile(torn, []byte(goldenSeed[:50]+"\n"), 0o600))
	_, err = signing.LoadSigner(torn)
	require.Error(t, err)
	require.NotContains(t, err.Error(), goldenSeed[2:50])

	s := goldenSigner(t)
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		out := fmt.Sprintf(f, s)
		require.Contains(t, out, pub, f)
		require.NotContains(t, out, goldenSeed[2:], f)
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "signer", s)
	require.Contains(t, buf.String(), pub)
	raw, _ := nkeys.FromSeed([]byte(goldenSeed))
	priv, _ := raw.PrivateKey()
	require.NotContains(t, fmt.Sprintf("%#v %+v", s, *s), string(priv[2:]))
}

// BenchmarkSign and BenchmarkVerify: one signature or one check over a
// revision the size of events/testdata/lane.v2.json.
func BenchmarkSign(b *testing.B) {
	s, err := signing.NewSigner([]byte(goldenSeed))
	require.NoError(b, err)
	payload, err := os.ReadFile("../../events/testdata/lane.v2.json")
	require.NoError(b, err)
	h := nats.Header{}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		s.Sign(h, "lane.0", payload)
	}
}

func BenchmarkVerify(b *testing.B) {
	s, err := signing.NewSigner([]byte(goldenSeed))
	require.NoError(b, err)
	payload, err := os.ReadFile("../../events/testdata/lane.v2.json")
	require.NoError(b, err)
	h := nats.Header{}
	s.Sign(h, "lane.0", payload)
	ks, err := signing.ParseKeys(s.PublicKey())
	require.NoError(b, err)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if ks.Verify("lane.0", 1, h, payload) != "" {
			b.Fatal("does not verify")
		}
	}
}
