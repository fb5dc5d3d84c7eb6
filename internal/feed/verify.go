package feed

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/internal/signing"
)

// ErrForged is returned by Verify for a feed message that no trusted key
// signed: anyone who may publish to the feed's subjects can append one.
var ErrForged = errors.New("feed: message not signed by a trusted key")

// Verify decodes a feed message (its subject, headers and body as the
// stream holds them) and checks that a key of keys signed it, as a relay
// does before it believes a message and as a consumer should before it
// acts on one. The check, for a consumer in another language: the header
// Spendgate-Sig-Key is the signer's public nkey ("U..."), one of the
// replicas' trusted keys (for a retired key, trusted up to its until=
// sequence, compared with source_seq); Spendgate-Sig is the base64url
// (unpadded) Ed25519 signature, by that key, over the bytes
// "spendgate.feed.v1\n" + subject + "\n" + body.
//
// It returns an error wrapping ErrForged for a message no key of keys
// signed (unsigned, a bad signature, an untrusted key), or Decode's error
// for a body that is not a feed.v1 message.
func Verify(keys *signing.KeySet, subject string, h nats.Header, body []byte) (Message, error) {
	m, err := Decode(body)
	if err != nil {
		return m, err
	}
	signer, ok := signing.VerifyMsg(h, signing.DomainFeed, subject, body)
	switch {
	case signer == "":
		return m, fmt.Errorf("%w: unsigned", ErrForged)
	case !ok:
		return m, fmt.Errorf("%w: bad signature by %s", ErrForged, signer)
	case !keys.Trusts(signer, m.SourceSeq):
		return m, fmt.Errorf("%w: signed by %s, not trusted for source_seq %d", ErrForged, signer, m.SourceSeq)
	}
	return m, nil
}
