package projector

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVerifySnapshot_UntrustedNotDecoded: with signatures checked, a
// snapshot no trusted key signed (here unsigned, its digest its writer's
// own) is reported for that alone, and its body is not decoded: JSON
// decodes into many times its size, and anyone who may write the bucket can
// write such a body. The body here is not even JSON, so the problem
// reported says which check ran first. How it can fail: when the body was
// decoded before the signature was checked, the problem reported was the
// body's JSON error.
func TestVerifySnapshot_UntrustedNotDecoded(t *testing.T) {
	body := `{"version":5,"seq":7,"reservations":[` + strings.Repeat("{},", 1000) + "\n"
	sum := sha256.Sum256([]byte(body))
	h, err := json.Marshal(map[string]any{"format": snapshotFormat, "version": 5, "seq": 7, "size": len(body), "sha256": hex.EncodeToString(sum[:])})
	require.NoError(t, err)
	rep := &Report{}
	verifySnapshot(rep, NewState(), "spendgate", "snapshot-7", 7, append(append(h, '\n'), body...), func(string) bool { return true })
	require.Len(t, rep.Problems, 1)
	require.Contains(t, rep.Problems[0], "it is not signed")
}
