package main

import (
	"fmt"
	"os"

	"github.com/spendgate/spendgate/roles"
	"github.com/spendgate/spendgate/streams"
)

var rolesCommand = command{
	name:     "spendgate roles",
	synopsis: "[--bucket NAME] [--prefix PREFIX] [--account NAME] [--tenant NAME ...] [--nsc]",
	about: `Prints a nats-server permission layout with five roles: replica (runs serve),
service (admit, settle, release, void), admin (every endpoint), finance (reads the
ledger and runs audits; writes nothing) and feed (follows the live event feed). Include it in the server's config; the
file holds no password: the server reads SPENDGATE_<USER>_PASSWORD from its
environment. With --account it prints the layout inside an account with
JetStream; with --nsc, the nsc flags of each role for operator/JWT mode.
Each --tenant NAME adds an account NAME for that tenant, with one user NAME
(password SPENDGATE_<NAME>_PASSWORD): the replicas' account (--account,
default SPENDGATE) exports <prefix>t.NAME.> to it alone, and it imports
admit, settle, release, void, budget.get and budget.list from there under their
plain subjects, so the replica reads the tenant from a subject the tenant
cannot choose; and, under the JetStream prefix spendgate.js.API, the info,
pulls and acks of its one feed consumer t-NAME, which the operator creates
(spendgate feed consumer --tenant NAME) and the tenant cannot create or change.`,
}

// rolesCmd is spendgate roles.
func rolesCmd(args []string) int {
	fs := newFlagSet("roles")
	bucket := fs.String("bucket", streams.DefaultBucket, "ledger bucket name")
	prefix := fs.String("prefix", streams.DefaultPrefix, "service subject prefix")
	account := fs.String("account", "", "print the layout inside this account (accounts form)")
	nsc := fs.Bool("nsc", false, "print each role's nsc add user flags instead (operator/JWT mode)")
	var tenants multiFlag
	fs.Var(&tenants, "tenant", "add a tenant account `NAME` that imports its own endpoints; repeat for several")
	if code, ok := rolesCommand.parse(fs, args); !ok {
		return code
	}
	layout, err := streams.New(streams.Config{Bucket: *bucket, Prefix: *prefix})
	if err != nil {
		return rolesCommand.usageError(fs, err.Error())
	}
	var out string
	if *nsc && len(tenants) > 0 {
		return rolesCommand.usageError(fs, "--tenant renders accounts in the configuration form; it does not combine with --nsc")
	}
	if *nsc {
		for _, r := range roles.All(layout) {
			out += fmt.Sprintf("# %s\nnsc add user --name %s %s\n", r.Name, r.Name, r.NSCFlags())
		}
	} else if out, err = roles.Config(layout, *account, tenants...); err != nil {
		fmt.Fprintln(os.Stderr, "spendgate roles:", err)
		return exitError
	}
	if _, err := fmt.Fprint(os.Stdout, out); err != nil {
		fmt.Fprintln(os.Stderr, "spendgate roles:", err)
		return exitError
	}
	return exitOK
}
