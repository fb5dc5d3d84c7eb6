package main

import (
	"fmt"
	"os"

	"github.com/spendgate/spendgate/roles"
	"github.com/spendgate/spendgate/streams"
)

var rolesCommand = command{
	name:     "spendgate roles",
	synopsis: "[--bucket NAME] [--prefix PREFIX] [--account NAME] [--nsc]",
	about: `Prints a nats-server permission layout with five roles: replica (runs serve),
service (admit, settle, release), admin (every endpoint), finance (reads the
ledger and runs audits; writes nothing) and feed (follows the live event feed). Include it in the server's config; the
file holds no password: the server reads SPENDGATE_<USER>_PASSWORD from its
environment. With --account it prints the layout inside an account with
JetStream; with --nsc, the nsc flags of each role for operator/JWT mode.`,
}

// rolesCmd is spendgate roles.
func rolesCmd(args []string) int {
	fs := newFlagSet("roles")
	bucket := fs.String("bucket", streams.DefaultBucket, "ledger bucket name")
	prefix := fs.String("prefix", streams.DefaultPrefix, "service subject prefix")
	account := fs.String("account", "", "print the layout inside this account (accounts form)")
	nsc := fs.Bool("nsc", false, "print each role's nsc add user flags instead (operator/JWT mode)")
	if code, ok := rolesCommand.parse(fs, args); !ok {
		return code
	}
	layout, err := streams.New(streams.Config{Bucket: *bucket, Prefix: *prefix})
	if err != nil {
		return rolesCommand.usageError(fs, err.Error())
	}
	var out string
	if *nsc {
		for _, r := range roles.All(layout) {
			out += fmt.Sprintf("# %s\nnsc add user --name %s %s\n", r.Name, r.Name, r.NSCFlags())
		}
	} else if out, err = roles.Config(layout, *account); err != nil {
		fmt.Fprintln(os.Stderr, "spendgate roles:", err)
		return exitError
	}
	if _, err := fmt.Fprint(os.Stdout, out); err != nil {
		fmt.Fprintln(os.Stderr, "spendgate roles:", err)
		return exitError
	}
	return exitOK
}
