// Package config gives every spendgate command the same three sources of
// configuration, for the flags it already declares:
//
//  1. a flag on the command line,
//  2. for the flags the command lists with EnvFlags only, an environment
//     variable SPENDGATE_<FLAG_NAME> (upper case, '-' and '.' as '_':
//     --data-dir is SPENDGATE_DATA_DIR), named in the flag's --help,
//  3. a line of the config file named by --config,
//  4. the flag's default,
//
// first match wins. Declare the flags, list the environment's with
// EnvFlags, then call Apply after fs.Parse. A SPENDGATE_* variable of a flag
// not listed is not read (Env.Ignored names those set, for a warning): a
// variable meant for something else never acts as a flag.
//
// # The file
//
// One setting per line, the flag's name without dashes, '=', the value:
//
//	# /etc/spendgate/serve.conf
//	data-dir    = /var/lib/spendgate
//	nats-url    = nats://nats-1:4222,nats://nats-2:4222
//	sync-always = true
//	log-format  = json
//	password    = s3cr#t            (the '#' is part of the value)
//
// Blank lines and lines starting with '#' are skipped. Keys and values are
// trimmed of spaces; a value in double quotes is a Go string literal (for
// leading or trailing spaces, or escapes), and everything else is taken
// literally, '#' included (it occurs in passwords and URLs). A key that is
// not a flag of the command, a key given twice and a value the flag rejects
// are errors naming the file, the line and the key.
//
// Why this format and not JSON, TOML or YAML: flags are flat name=value
// strings already parsed by each flag's own Set, so a line per flag maps one
// to one and needs no type conversion; it has comments, which JSON lacks;
// its errors have natural line numbers; and it needs no new dependency
// (go.yaml.in/yaml is only an indirect dependency of nats-server).
//
// Logging sets up log/slog from --log-level and --log-format.
package config
