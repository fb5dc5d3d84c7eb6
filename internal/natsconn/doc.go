// Package natsconn builds the *nats.Conn of every spendgate program (serve,
// the client commands, audit) the way a NATS client should: several server
// URLs, every NATS authentication method, TLS with a private CA and client
// certificates, a connection name, and reconnects that never give up for a
// long-running replica.
//
//	var o natsconn.Options
//	o.RegisterFlags(fs)           // --nats-url --creds --nkey --user --password --token --tls-ca --tls-cert --tls-key
//	fs.Parse(args)
//	nc, err := o.Connect("spendgate-audit")
//	log.Info("connected", "nats", o.Describe())
//
// # Flags and environment
//
// Every flag takes its default from the environment, with the variable names
// of the nats CLI; a secret (a password, a token) can come from the
// environment alone, so it never has to appear in a command line (ps, shell
// history). The flag help shows the variable's name, never its value.
//
//	flag          environment                      meaning
//	--nats-url    SPENDGATE_NATS_URL, NATS_URL     server URLs, comma-separated (nats://, tls://, ws://, wss://);
//	                                               SPENDGATE_NATS_URL wins over NATS_URL; default nats://127.0.0.1:4222
//	--creds       NATS_CREDS                       user credentials file (JWT and seed; operator/JWT mode)
//	--nkey        NATS_NKEY                        user nkey seed file
//	--user        NATS_USER                        user name
//	--password    NATS_PASSWORD                    password (prefer the variable: a flag shows in ps)
//	--token       NATS_TOKEN                       authentication token (prefer the variable)
//	--tls-ca      NATS_CA                          PEM file of the CA(s) that signed the server certificates
//	--tls-cert    NATS_CERT                        PEM client certificate (mTLS); needs --tls-key
//	--tls-key     NATS_KEY                         PEM private key of --tls-cert
//	--inbox-prefix SPENDGATE_INBOX_PREFIX          prefix of this client's reply subjects (default _INBOX);
//	                                               the roles layout gives each role a private one
//
// One authentication method at a time: --creds, --nkey, --user with
// --password, or --token. Credentials inside a URL (nats://user:pass@host)
// still work but show in argv; prefer the variables.
//
// # Errors
//
// Validate reports a bad combination or an unreadable file before any
// network traffic; Connect wraps the NATS error with its likely cause and the
// flag that fixes it (ErrTLSUnknownAuthority: "certificate signed by unknown
// authority: pass --tls-ca ..."). Describe, for logs, names the servers and
// the methods in use, never a secret.
package natsconn
