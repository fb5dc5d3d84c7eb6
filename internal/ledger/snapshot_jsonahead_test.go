package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSnapshot_LargeJSONWaitsForDigest: a body whose JSON line is longer
// than jsonAheadMax and whose digest is not the header's (a genuine header
// replayed over a forged body of its size) fails its digest before the
// JSON is decoded; one below the bound is decoded first, as it arrives.
// The JSON here is cheap to decode (an unknown field holding a long
// string): the forged bodies that matter decode into many times their
// size. How it can fail: without the bound the large line decoded without
// error (the digest is checked afterwards), so decodeSnapshotAhead
// returned no error.
func TestSnapshot_LargeJSONWaitsForDigest(t *testing.T) {
	object := func(jsonLen int) []byte {
		body := `{"version":5,"seq":7,"x":"`
		body += strings.Repeat("a", jsonLen-len(body)-2) + `"}` + "\n"
		sum := sha256.Sum256([]byte(body + "x")) // not this body's
		h, err := json.Marshal(snapshotHeader{Format: SnapshotFormat, Version: 5, Seq: 7, Size: len(body), SHA256: hex.EncodeToString(sum[:])})
		require.NoError(t, err)
		return append(append(h, '\n'), body...)
	}
	_, _, _, err := decodeSnapshotAhead(wholeObject(object(jsonAheadMax+1)), nil)
	require.ErrorIs(t, err, ErrSnapshotInvalid)
	require.ErrorContains(t, err, "digest mismatch")

	st, h, ahead, err := decodeSnapshotAhead(wholeObject(object(1000)), nil)
	require.NoError(t, err, "decoded as it arrives")
	require.NotNil(t, st)
	require.ErrorContains(t, ahead.check(h), "digest mismatch", "and its digest checked after")
}
