package natsconn

import "errors"

// Errors Validate and Connect wrap; test them with errors.Is.
var (
	// ErrInvalid: the options contradict each other or name a file that
	// cannot be used. Validate's errors wrap it.
	ErrInvalid = errors.New("natsconn: invalid connection options")
	// ErrTLSUnknownAuthority: the server's certificate is signed by a CA
	// the client does not trust (fix: --tls-ca).
	ErrTLSUnknownAuthority = errors.New("certificate signed by unknown authority: pass --tls-ca with the CA that signed the server's certificate")
	// ErrTLSHostname: the server's certificate does not name the host
	// connected to (fix: connect by a name the certificate lists).
	ErrTLSHostname = errors.New("server certificate is not valid for the host in the URL: connect by a name or IP the certificate lists")
	// ErrTLSClientCertRequired: the server requires a client certificate
	// and none was sent (fix: --tls-cert and --tls-key).
	ErrTLSClientCertRequired = errors.New("the server requires a client certificate: pass --tls-cert and --tls-key")
	// ErrTLSClientCertRefused: the server refused the client certificate
	// (signed by a CA it does not trust, expired, or wrong usage).
	ErrTLSClientCertRefused = errors.New("the server refused the client certificate (--tls-cert): it must be signed by a CA the server trusts and be valid for client authentication")
	// ErrTLSRequired: the server requires TLS and the client did not
	// offer it, or the reverse.
	ErrTLSRequired = errors.New("TLS mismatch: the server requires TLS (use a tls:// URL or --tls-ca) or does not offer it (drop the TLS options)")
	// ErrAuthorization: the server refused the credentials.
	ErrAuthorization = errors.New("authorization violation: the server refused these credentials (check --creds, --nkey, --user/--password or --token and their NATS_* variables)")
	// ErrUnreachable: no server accepted a connection.
	ErrUnreachable = errors.New("no NATS server reachable at the URLs given (check --nats-url / $NATS_URL and that the server runs)")
	// ErrInboxDenied: the login may not receive replies on the
	// connection's inbox prefix (fix: --inbox-prefix, the role's).
	ErrInboxDenied = errors.New("this login may not receive replies on its inbox: give its role's inbox prefix (--inbox-prefix or $SPENDGATE_INBOX_PREFIX; `spendgate roles` prints each role's)")
)
