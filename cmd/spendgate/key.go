package main

import (
	"fmt"
	"os"

	"github.com/spendgate/spendgate/internal/signing"
)

var keyCommand = command{
	name:     "spendgate key",
	synopsis: "--file FILE",
	about: `Prints the public key of the nkey seed in FILE, first creating a new seed
there (mode 0600) if FILE does not exist. The seed signs a replica's
revisions (serve --signing-key FILE); the public key is what replicas and
auditors trust (--trusted-keys).`,
}

// keyCmd is spendgate key.
func keyCmd(args []string) int {
	fs := newFlagSet("key")
	file := fs.String("file", "", "nkey seed file (created if it does not exist)")
	insecure := fs.Bool("insecure-key-permissions", false, "accept an existing seed file that its group or others may read (refused otherwise, as ssh refuses such a private key)")
	if code, ok := keyCommand.parse(fs, args); !ok {
		return code
	}
	if *file == "" {
		return keyCommand.usageError(fs, "--file is required")
	}
	var opts []signing.KeyFileOption
	if *insecure {
		opts = append(opts, signing.AllowInsecurePermissions())
	}
	s, created, err := signing.LoadOrCreate(*file, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate key:", err)
		return 1
	}
	if created {
		fmt.Fprintf(os.Stderr, "created %s\n", *file)
	}
	fmt.Println(s.PublicKey())
	return 0
}
