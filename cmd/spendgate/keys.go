package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/streams"
)

// Files serve keeps in its data dir when no key or trusted-keys list is
// given.
const (
	signingKeyFile  = "signing.nk"
	trustedKeysFile = "trusted-keys"
	// envSigningSeed holds a signing seed itself (never a flag: a seed
	// must not show in argv).
	envSigningSeed = "SPENDGATE_SIGNING_SEED"
)

// replicaKeys is serve's signing key and trusted keys, and how to read
// them again (SIGHUP).
type replicaKeys struct {
	keyPath, trustSpec string
	fileOpts           []signing.KeyFileOption
	signer             *signing.Signer
	trust              *signing.KeySet
}

// loadReplicaKeys resolves serve's keys. The signing key is, in order: the
// seed in $SPENDGATE_SIGNING_SEED, the file --signing-key, or with the
// embedded server <data-dir>/signing.nk (created on first start), and
// with --nats-url a key made for this process alone. The trusted keys are
// --trusted-keys; without it, the embedded server's replica trusts the
// list in <data-dir>/trusted-keys, created on first start with its own
// public key (and "unsigned until=<last sequence>" if the stream already
// held revisions), and a replica joining --nats-url checks no signature
// (logged as a warning). A seed file its group or others may access is
// refused unless insecurePerms (--insecure-key-permissions); no error holds
// a seed.
func loadReplicaKeys(ctx context.Context, log *slog.Logger, js jetstream.JetStream, layout streams.Layout, dataDir, keyFlag, trustFlag string, embeddedServer, insecurePerms bool) (*replicaKeys, error) {
	k := &replicaKeys{keyPath: keyFlag, trustSpec: trustFlag}
	if insecurePerms {
		k.fileOpts = append(k.fileOpts, signing.AllowInsecurePermissions())
	}
	if seed := os.Getenv(envSigningSeed); seed != "" && keyFlag == "" {
		s, err := signing.NewSigner([]byte(seed))
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", envSigningSeed, err)
		}
		k.signer = s
	} else {
		if k.keyPath == "" {
			// The data dir's key, with the embedded server or not:
			// replicas started from one directory share it (and so trust
			// each other); a replica elsewhere makes its own, which the
			// ledger's trusted keys must name before it may write.
			k.keyPath = filepath.Join(dataDir, signingKeyFile)
			s, created, err := signing.LoadOrCreate(k.keyPath, k.fileOpts...)
			if err != nil {
				return nil, err
			}
			if created {
				log.Info("created a signing key", "file", k.keyPath, "public_key", s.PublicKey())
			}
			k.signer = s
		} else {
			s, err := signing.LoadSigner(k.keyPath, k.fileOpts...)
			if err != nil {
				return nil, err
			}
			k.signer = s
		}
	}
	if k.trustSpec == "" && embeddedServer {
		k.trustSpec = filepath.Join(dataDir, trustedKeysFile)
		if _, err := os.Stat(k.trustSpec); errors.Is(err, os.ErrNotExist) {
			if err := writeTrustedKeys(ctx, js, layout, k.trustSpec, k.signer.PublicKey()); err != nil {
				return nil, err
			}
			log.Info("created the trusted keys list", "file", k.trustSpec)
		}
	}
	if k.trustSpec != "" {
		ks, err := signing.ParseKeys(k.trustSpec)
		if err != nil {
			return nil, err
		}
		if err := signerTrusted(k.signer, ks, k.trustSpec); err != nil {
			return nil, err
		}
		k.trust = ks
	} else {
		log.Warn("no trusted keys of this replica's own: it follows the ledger's trusted keys (the first replica to write them is trusted on first use); pass --trusted-keys (see docs/security.md, Keys)")
	}
	log.Info("revision signing", "public_key", k.signer.PublicKey(), "trusted_keys", len(k.trust.Keys()), "unsigned_until", k.trust.UnsignedUntil())
	return k, nil
}

// writeTrustedKeys creates a trusted-keys file that trusts pub, and the
// unsigned history of the stream as it stands.
func writeTrustedKeys(ctx context.Context, js jetstream.JetStream, layout streams.Layout, path, pub string) error {
	body := "# Public keys whose revisions this replica folds (see docs/security.md, Keys).\n" + pub + "\n"
	if s, err := js.Stream(ctx, layout.StreamName()); err == nil {
		if last := s.CachedInfo().State.LastSeq; last > 0 {
			body += fmt.Sprintf("# Revisions written before signing was turned on.\nunsigned until=%d\n", last)
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("trusted keys: reading the ledger stream: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(body), 0o600)
}

// reload reads the signing key file and the trusted keys again. On error
// nothing changes.
func (k *replicaKeys) reload() (changed bool, err error) {
	signer, trust := k.signer, k.trust
	if k.keyPath != "" {
		if signer, err = signing.LoadSigner(k.keyPath, k.fileOpts...); err != nil {
			return false, err
		}
	}
	if k.trustSpec != "" {
		if trust, err = signing.ParseKeys(k.trustSpec); err != nil {
			return false, err
		}
	}
	if k.trustSpec != "" {
		if err := signerTrusted(signer, trust, k.trustSpec); err != nil {
			return false, err
		}
	}
	changed = signer.PublicKey() != k.signer.PublicKey() || trust.String() != k.trust.String()
	k.signer, k.trust = signer, trust
	return changed, nil
}

// signerTrusted refuses a signing key the replica's own trusted keys do not
// trust for new revisions (absent, or retired with until=). Such a replica
// would acknowledge requests whose revisions every replica skips, itself
// after a restart: acknowledged admissions and budgets would vanish. It
// happens when a seed is lost and a new one made (the embedded server
// makes one when its file is gone), or when the key in use is retired.
func signerTrusted(s *signing.Signer, ks *signing.KeySet, spec string) error {
	if ks.Trusts(s.PublicKey(), math.MaxUint64) {
		return nil
	}
	return fmt.Errorf("the signing key %s is not trusted for new revisions by %s: every replica would skip this replica's writes; add it to the list first (see docs/security.md, Keys, rotating the key), or restore the seed of a trusted key", s.PublicKey(), spec)
}
