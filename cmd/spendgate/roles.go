package main

import (
	"fmt"
	"os"

	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/streams"
)

var rolesCommand = command{
	name:     "spendgate roles",
	synopsis: "[--bucket NAME] [--prefix PREFIX] [--account NAME] [--tenant NAME ...] [--tls-cert FILE --tls-key FILE [--tls-ca FILE]] [--nsc]",
	about: `Prints a nats-server permission layout with seven roles: replica (runs serve),
service (admit, settle, release, void), admin (every endpoint), finance (reads
the ledger and runs audits; writes nothing), feed (follows the live event feed),
gateway (runs spendgate gateway: resolves keys, never manages them) and alerts
(runs spendgate alerts webhook: reads and acknowledges the alert stream only).
Include it in the server's config; the file holds no password: the server
reads SPENDGATE_<USER>_PASSWORD from its environment. With --account it prints
the layout inside an account with JetStream; with --nsc, the same as nsc
commands for operator/JWT mode (each role's nsc add user, in --account if
given).
Each --tenant NAME adds an account NAME for that tenant, with one user NAME
(password SPENDGATE_<NAME>_PASSWORD): the replicas' account (--account,
default SPENDGATE) exports <prefix>t.NAME.> to it alone, and it imports
admit, settle, release, void, budget.get, budget.list and tenantlimits.get
from there under their plain subjects, so the replica reads the tenant from a subject the tenant
cannot choose; and, under the JetStream prefix spendgate.js.API, the info,
pulls and acks of its one feed consumer t-NAME, which the operator's admin
creates (spendgate feed consumer --tenant NAME) and neither the tenant nor the
feed role can create, change or delete.
Tenants need --account: the replicas' users move into that account, and a
ledger written under a layout without --account (the global account $G) stays
behind; roles says so and how to move it.
With --nsc, each tenant's exports are private, and each import of the tenant's
account carries an activation token for its one subject, written to
NAME.<subject>.jwt in the current directory.
--tls-cert and --tls-key add the server's tls block (clients connect with
tls:// and --tls-ca); with --tls-ca, mutual TLS: every client presents a
certificate signed by that CA, and the server logs it in as the user its
subject names (CN=replica, CN=acme, ...: verify_and_map), with no password.`,
}

// rolesCmd is spendgate roles.
func rolesCmd(args []string) int {
	fs := newFlagSet("roles")
	bucket := fs.String("bucket", streams.DefaultBucket, "ledger bucket name")
	prefix := fs.String("prefix", streams.DefaultPrefix, "service subject prefix")
	account := fs.String("account", "", "print the layout inside this account (accounts form)")
	nsc := fs.Bool("nsc", false, "print nsc commands instead (operator/JWT mode): each role's user, each tenant's account, exports, activations and imports")
	var tenants multiFlag
	fs.Var(&tenants, "tenant", "add a tenant account `NAME` that imports its own endpoints; repeat for several (needs --account)")
	var tls roles.TLS
	fs.StringVar(&tls.Cert, "tls-cert", "", "PEM certificate of the server: render its tls block (with --tls-key)")
	fs.StringVar(&tls.Key, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&tls.CA, "tls-ca", "", "PEM CA of the clients' certificates: mutual TLS, each certificate logs in as the user its subject names (CN=<user>)")
	if code, ok := rolesCommand.parse(fs, args); !ok {
		return code
	}
	layout, err := streams.New(streams.Config{Bucket: *bucket, Prefix: *prefix})
	if err != nil {
		return rolesCommand.usageError(fs, err.Error())
	}
	if *nsc && tls != (roles.TLS{}) {
		return rolesCommand.usageError(fs, "--tls-* render the server's tls block, which --nsc does not print: put it in the server's configuration (verify_and_map does not apply to JWT users)")
	}
	var out string
	if *nsc {
		out, err = roles.NSC(layout, *account, tenants...)
	} else {
		out, err = roles.Render(layout, roles.Options{Account: *account, Tenants: tenants, TLS: tls})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate roles:", err)
		return exitError
	}
	if _, err := fmt.Fprint(os.Stdout, out); err != nil {
		fmt.Fprintln(os.Stderr, "spendgate roles:", err)
		return exitError
	}
	return exitOK
}
