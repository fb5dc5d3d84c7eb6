package main

import (
	"errors"
	"flag"
	"os"

	"github.com/spendgate/spendgate/internal/signing"
	"github.com/spendgate/spendgate/projector"
)

// verifyFlags are the trust flags of every command that folds the ledger
// itself (audit check, balances and export, report --replay, snapshot,
// archive trim): it verifies every revision and snapshot as a replica
// does, against the replicas' public keys, and refuses to run without them
// unless told --unverified.
type verifyFlags struct {
	trusted    string
	unverified bool
}

// trustedKeysUsage is the help of --trusted-keys on the folding commands.
const trustedKeysUsage = "the replicas' public keys, or files of them, comma-separated ($SPENDGATE_TRUSTED_KEYS; with the embedded server ./spendgate-data/trusted-keys): they vouch for the ledger's trusted keys, and every revision and snapshot is verified as a replica verifies it"

func (v *verifyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&v.trusted, "trusted-keys", os.Getenv("SPENDGATE_TRUSTED_KEYS"), trustedKeysUsage)
	fs.BoolVar(&v.unverified, "unverified", false, "fold without checking any signature (a ledger written without signing); what it prints is not verified")
}

// errNeedKeys is the usage error of a folding command given neither
// --trusted-keys nor --unverified.
var errNeedKeys = errors.New("needs --trusted-keys KEYS (the replicas' public keys; with the embedded server ./spendgate-data/trusted-keys) to verify what it folds, or --unverified to fold without checking signatures")

// keys returns the key set to verify against (nil with --unverified), or
// a usage error.
func (v *verifyFlags) keys() (*signing.KeySet, error) {
	switch {
	case v.unverified && v.trusted != "":
		return nil, errors.New("--unverified and --trusted-keys together: give one")
	case v.unverified:
		return nil, nil
	case v.trusted == "":
		return nil, errNeedKeys
	}
	return parseTrusted(v.trusted)
}

// projectorOptions are the projector's options for what v says.
func (v *verifyFlags) projectorOptions(ks *signing.KeySet) []projector.Option {
	if v.unverified {
		return []projector.Option{projector.Unverified()}
	}
	return []projector.Option{projector.Verifying(ks)}
}

// checkOptions are Check's options for what v says.
func (v *verifyFlags) checkOptions(ks *signing.KeySet) []projector.CheckOption {
	if v.unverified {
		return []projector.CheckOption{projector.WithUnverified()}
	}
	return []projector.CheckOption{projector.WithTrust(ks)}
}
