package natsconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/spendgate/spendgate/internal/secret"
)

// Environment variables read by FromEnv and RegisterFlags (the nats CLI's
// names, plus two of spendgate's).
const (
	// EnvSpendgateURL holds server URLs; it wins over EnvURL.
	EnvSpendgateURL = "SPENDGATE_NATS_URL"
	// EnvURL holds server URLs, comma-separated.
	EnvURL = "NATS_URL"
	// EnvCreds names a user credentials file.
	EnvCreds = "NATS_CREDS"
	// EnvNKey names a user nkey seed file.
	EnvNKey = "NATS_NKEY"
	// EnvUser is the user name.
	EnvUser = "NATS_USER"
	// EnvPassword is the password.
	EnvPassword = "NATS_PASSWORD"
	// EnvToken is the authentication token.
	EnvToken = "NATS_TOKEN"
	// EnvCA names the PEM file of the servers' CA.
	EnvCA = "NATS_CA"
	// EnvCert names the PEM client certificate.
	EnvCert = "NATS_CERT"
	// EnvKey names the PEM key of the client certificate.
	EnvKey = "NATS_KEY"
	// EnvInboxPrefix is the reply-subject prefix.
	EnvInboxPrefix = "SPENDGATE_INBOX_PREFIX"
)

// Defaults.
const (
	// DefaultURL is used when Options.URL is empty.
	DefaultURL = "nats://127.0.0.1:4222"
	// DefaultConnectTimeout bounds dialing and the TLS and CONNECT
	// handshakes with one server.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultReconnectWait is the pause between two reconnect rounds over
	// the server list (plus jitter).
	DefaultReconnectWait = 250 * time.Millisecond
	// DefaultPingInterval is how often the client pings an idle server: a
	// dead server is noticed within PingInterval*(MaxPingsOut+1).
	DefaultPingInterval = 20 * time.Second
	// DefaultMaxPingsOut is the number of unanswered pings that drop the
	// connection (and start a reconnect).
	DefaultMaxPingsOut = 3
)

// Options says how to reach and authenticate to NATS. The zero value
// connects to DefaultURL without authentication.
type Options struct {
	// URL is one or more server URLs, comma-separated.
	URL string
	// Creds is a user credentials file (a user JWT and its nkey seed).
	Creds string
	// NKey is a file holding a user nkey seed.
	NKey string
	// User and Password authenticate with a user name and password.
	User, Password string
	// Token authenticates with a token.
	Token string
	// TLSCA is a PEM file of the CA(s) that signed the servers'
	// certificates; setting it requires TLS.
	TLSCA string
	// TLSCert and TLSKey are a PEM client certificate and its key (mTLS).
	TLSCert, TLSKey string
	// InboxPrefix replaces "_INBOX" in this connection's reply subjects;
	// a role with a private inbox (package roles) needs it.
	InboxPrefix string
	// InsecureKeyPermissions accepts a Creds or NKey file that its group
	// or others may access (--insecure-key-permissions). Without it
	// Validate refuses such a file, as ssh refuses a private key.
	InsecureKeyPermissions bool
	// ConnectTimeout bounds connecting to one server; default
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ReconnectWait is the pause between reconnect rounds; default
	// DefaultReconnectWait.
	ReconnectWait time.Duration
	// MaxReconnects bounds reconnect attempts per server; 0 means forever
	// (what a long-running replica wants), negative means never reconnect.
	MaxReconnects int
	// PingInterval and MaxPingsOut detect a dead server; defaults
	// DefaultPingInterval and DefaultMaxPingsOut.
	PingInterval time.Duration
	MaxPingsOut  int
	// Log, if set, receives disconnects, reconnects and asynchronous
	// errors (permission violations, slow consumers).
	Log *slog.Logger
}

// FromEnv returns the options the environment describes (see the package
// doc for the variables).
func FromEnv() Options { return fromEnv(os.Getenv) }

func fromEnv(getenv func(string) string) Options {
	o := Options{
		URL:         getenv(EnvSpendgateURL),
		Creds:       getenv(EnvCreds),
		NKey:        getenv(EnvNKey),
		User:        getenv(EnvUser),
		Password:    getenv(EnvPassword),
		Token:       getenv(EnvToken),
		TLSCA:       getenv(EnvCA),
		TLSCert:     getenv(EnvCert),
		TLSKey:      getenv(EnvKey),
		InboxPrefix: getenv(EnvInboxPrefix),
	}
	if o.URL == "" {
		o.URL = getenv(EnvURL)
	}
	return o
}

// RegisterFlags sets o from the environment (FromEnv) and registers the
// connection flags on fs with those values as defaults: --nats-url --creds
// --nkey --user --password --token --tls-ca --tls-cert --tls-key
// --inbox-prefix. The help of --password and --token names their variable
// and never prints a secret.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	o.registerFlags(fs, os.Getenv)
}

func (o *Options) registerFlags(fs *flag.FlagSet, getenv func(string) string) {
	env := fromEnv(getenv)
	o.URL, o.Creds, o.NKey, o.User = env.URL, env.Creds, env.NKey, env.User
	o.Password, o.Token = env.Password, env.Token
	o.TLSCA, o.TLSCert, o.TLSKey, o.InboxPrefix = env.TLSCA, env.TLSCert, env.TLSKey, env.InboxPrefix
	fs.StringVar(&o.URL, "nats-url", o.URL, "NATS server URLs, comma-separated ($"+EnvSpendgateURL+" or $"+EnvURL+"; empty means "+DefaultURL+")")
	fs.StringVar(&o.Creds, "creds", o.Creds, "NATS user credentials file, operator/JWT mode ($"+EnvCreds+")")
	fs.StringVar(&o.NKey, "nkey", o.NKey, "NATS user nkey seed file ($"+EnvNKey+")")
	fs.StringVar(&o.User, "user", o.User, "NATS user name ($"+EnvUser+")")
	fs.Var(&secretFlag{dst: &o.Password, env: EnvPassword}, "password", "NATS password; prefer $"+EnvPassword+": a flag value shows in ps and shell history")
	fs.Var(&secretFlag{dst: &o.Token, env: EnvToken}, "token", "NATS authentication token; prefer $"+EnvToken+": a flag value shows in ps and shell history")
	fs.StringVar(&o.TLSCA, "tls-ca", o.TLSCA, "PEM file of the CA that signed the NATS server certificates; requires TLS ($"+EnvCA+")")
	fs.StringVar(&o.TLSCert, "tls-cert", o.TLSCert, "PEM client certificate for mutual TLS, with --tls-key ($"+EnvCert+")")
	fs.StringVar(&o.TLSKey, "tls-key", o.TLSKey, "PEM private key of --tls-cert ($"+EnvKey+")")
	fs.StringVar(&o.InboxPrefix, "inbox-prefix", o.InboxPrefix, "prefix of this client's reply subjects, for a role with a private inbox ($"+EnvInboxPrefix+"; default _INBOX)")
	fs.BoolVar(&o.InsecureKeyPermissions, InsecureKeyPermissionsFlag, false, "accept seed and creds files (--creds, --nkey, a signing key) that their group or others may read; without it they are refused, as ssh refuses such a private key")
}

// InsecureKeyPermissionsFlag is the name of the flag that sets
// Options.InsecureKeyPermissions.
const InsecureKeyPermissionsFlag = "insecure-key-permissions" // secret.InsecureFlag without its dashes

// secretFlag is a string flag whose printed default is the name of the
// environment variable it came from, never its value.
type secretFlag struct {
	dst *string
	env string
}

// String is what flag prints as the default: "$VAR" if the variable set
// the value, else empty. It never returns the secret.
func (s *secretFlag) String() string {
	if s == nil || s.dst == nil || *s.dst == "" {
		return ""
	}
	return "$" + s.env
}

// Set stores the flag's value.
func (s *secretFlag) Set(v string) error { *s.dst = v; return nil }

// URLs returns the server URLs, DefaultURL if none is set.
func (o *Options) URLs() []string {
	var out []string
	for _, u := range strings.Split(o.URL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		out = []string{DefaultURL}
	}
	return out
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Validate checks the options without connecting. Its errors wrap
// ErrInvalid and say which flag to fix: a URL that does not parse, more than
// one authentication method (--creds, --nkey, --user/--password, --token),
// --password without --user, --tls-cert without --tls-key or the reverse, a
// file that cannot be read or does not hold what its flag needs, an inbox
// prefix with wildcards.
func (o *Options) Validate() error {
	for _, raw := range o.URLs() {
		s := raw
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			return invalid("--nats-url: %q is not a server URL", redactURL(raw))
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return invalid("--nats-url: %q: scheme %q is not one of nats, tls, ws, wss", redactURL(raw), u.Scheme)
		}
	}
	var methods []string
	if o.Creds != "" {
		methods = append(methods, "--creds")
	}
	if o.NKey != "" {
		methods = append(methods, "--nkey")
	}
	if o.User != "" || o.Password != "" {
		methods = append(methods, "--user/--password")
	}
	if o.Token != "" {
		methods = append(methods, "--token")
	}
	if len(methods) > 1 {
		return invalid("choose one authentication method, got %s (check the NATS_* variables too)", strings.Join(methods, " and "))
	}
	if o.Password != "" && o.User == "" {
		return invalid("--password (or $%s) needs --user (or $%s)", EnvPassword, EnvUser)
	}
	if o.User != "" && o.Password == "" {
		return invalid("--user %q needs a password: set $%s (or --password)", o.User, EnvPassword)
	}
	if o.Creds != "" {
		data, err := o.readKeyFile("--creds", o.Creds)
		if err != nil {
			return err
		}
		if !strings.Contains(string(data), "BEGIN NATS USER JWT") || !strings.Contains(string(data), "BEGIN USER NKEY SEED") {
			return invalid("--creds %s is not a NATS credentials file (no user JWT and seed)", secret.Redact(o.Creds))
		}
	}
	if o.NKey != "" {
		data, err := o.readKeyFile("--nkey", o.NKey)
		if err != nil {
			return err
		}
		p := secret.Redact(o.NKey)
		kp, err := nkeys.ParseDecoratedNKey(data)
		if err != nil {
			return invalid("--nkey %s holds no nkey seed: %v", p, secret.Error(err))
		}
		if _, err := kp.Seed(); err != nil {
			return invalid("--nkey %s holds a public key, not a seed", p)
		}
		if pub, _ := kp.PublicKey(); !strings.HasPrefix(pub, "U") {
			return invalid("--nkey %s is not a user seed (its public key starts with %q, a user's with \"U\")", p, pub[:1])
		}
	}
	if o.TLSCA != "" {
		data, err := readFile("--tls-ca", o.TLSCA)
		if err != nil {
			return err
		}
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			return invalid("--tls-ca %s holds no PEM certificate", o.TLSCA)
		}
	}
	switch {
	case o.TLSCert != "" && o.TLSKey == "":
		return invalid("--tls-cert needs --tls-key (or $%s)", EnvKey)
	case o.TLSKey != "" && o.TLSCert == "":
		return invalid("--tls-key needs --tls-cert (or $%s)", EnvCert)
	case o.TLSCert != "":
		if _, err := readFile("--tls-cert", o.TLSCert); err != nil {
			return err
		}
		if _, err := readFile("--tls-key", o.TLSKey); err != nil {
			return err
		}
		if _, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey); err != nil {
			return invalid("--tls-cert %s / --tls-key %s: %v", o.TLSCert, o.TLSKey, err)
		}
	}
	if strings.ContainsAny(o.InboxPrefix, "*> \t") || strings.HasSuffix(o.InboxPrefix, ".") || strings.HasPrefix(o.InboxPrefix, ".") {
		return invalid("--inbox-prefix %q must be dot-separated tokens without wildcards", o.InboxPrefix)
	}
	return nil
}

// readKeyFile reads the seed or creds file of flagName: refused if its group
// or others may access it, unless InsecureKeyPermissions. Its errors name
// no seed, even when path is one (a seed given where its file belongs).
func (o *Options) readKeyFile(flagName, path string) ([]byte, error) {
	if secret.LooksLikeSeed(path) {
		return nil, invalid("%s: %s is an nkey seed, not a file name: pass the name of the file that holds the seed, never the seed itself", flagName, secret.Redact(path))
	}
	data, err := secret.ReadFile(path, o.InsecureKeyPermissions)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, flagName, err)
	}
	return data, nil
}

func readFile(flagName, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, invalid("%s: %v", flagName, err)
	}
	return data, nil
}

// NATSOptions returns the nats.Options that Connect applies, after
// Validate: the name, authentication, TLS, timeouts and reconnect
// behaviour, then extra. It is for callers that build the connection
// themselves (nats.Connect(strings.Join(o.URLs(), ","), opts...)).
func (o *Options) NATSOptions(name string, extra ...nats.Option) ([]nats.Option, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	timeout := o.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	wait := o.ReconnectWait
	if wait <= 0 {
		wait = DefaultReconnectWait
	}
	maxReconnects := o.MaxReconnects
	switch {
	case maxReconnects == 0:
		maxReconnects = -1
	case maxReconnects < 0:
		maxReconnects = 0
	}
	ping := o.PingInterval
	if ping <= 0 {
		ping = DefaultPingInterval
	}
	pings := o.MaxPingsOut
	if pings <= 0 {
		pings = DefaultMaxPingsOut
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(timeout),
		nats.MaxReconnects(maxReconnects),
		nats.ReconnectWait(wait),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.PingInterval(ping),
		nats.MaxPingsOutstanding(pings),
	}
	if maxReconnects == 0 {
		opts = append(opts, nats.NoReconnect())
	}
	switch {
	case o.Creds != "":
		opts = append(opts, nats.UserCredentials(o.Creds))
	case o.NKey != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKey)
		if err != nil {
			return nil, invalid("--nkey %s: %v", secret.Redact(o.NKey), secret.Error(err))
		}
		opts = append(opts, opt)
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.TLSCert != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	if log := o.Log; log != nil {
		var refused replyRefusals
		opts = append(opts,
			nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
				if err == nil && nc.IsClosed() {
					// The program closed it (Close or Drain): a clean
					// stop is no warning.
					log.Debug("nats connection closed")
					return
				}
				log.Warn("nats disconnected", "err", err)
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				refused.reconnected(time.Now())
				log.Info("nats reconnected", "server", redactURL(nc.ConnectedUrl()))
			}),
			nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
				switch refused.count(err, time.Now()) {
				case 0:
				case 1:
					log.Warn("nats: an answer to a request taken before the reconnect was refused by the server the connection moved to "+
						"(a role may reply only to requests received on its own connection): its caller waits out one attempt and retries; "+
						"the next ones after this reconnect are logged at debug level", "err", err)
					return
				default:
					log.Debug("nats: an answer to a request taken before the reconnect was refused", "err", err)
					return
				}
				if sub != nil {
					log.Error("nats async error", "subject", sub.Subject, "err", err)
					return
				}
				log.Error("nats async error", "err", err)
			}),
		)
	}
	return append(opts, extra...), nil
}

// Connect validates o and connects to the first server of o.URLs() that
// accepts, named name (shown by the server's connz and in its logs); extra
// options apply after o's. A failure wraps ErrInvalid (see Validate),
// ErrTLSUnknownAuthority, ErrTLSHostname, ErrTLSClientCertRequired,
// ErrTLSClientCertRefused, ErrTLSRequired, ErrAuthorization or
// ErrUnreachable when the cause is one of those, and keeps the NATS error.
func (o *Options) Connect(name string, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := o.NATSOptions(name, extra...)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(strings.Join(o.URLs(), ","), opts...)
	if err != nil {
		return nil, o.explain(err)
	}
	if err := checkInbox(nc); err != nil {
		nc.Close()
		return nil, &connectError{desc: o.Describe(), cause: ErrInboxDenied, err: err}
	}
	return nc, nil
}

// inboxCheckTimeout bounds checkInbox's round trip.
const inboxCheckTimeout = 5 * time.Second

// checkInbox returns the server's refusal when the login may not receive
// replies on nc's inbox prefix (Connect wraps it in ErrInboxDenied): the
// server refuses such a subscription only by an asynchronous
// error, and every request (an endpoint's, a JetStream read's) would then
// wait out its timeout, for a minute in `audit check`, and end without
// saying why. One subscription and one round trip: the server answers a
// refused subscription before the flush's PONG.
func checkInbox(nc *nats.Conn) error {
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return fmt.Errorf("natsconn: subscribing to the inbox: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.FlushTimeout(inboxCheckTimeout); err != nil {
		return fmt.Errorf("natsconn: the server did not answer within %s: %w", inboxCheckTimeout, err)
	}
	if err := nc.LastError(); errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), sub.Subject) {
		return err
	}
	return nil
}

// connectError keeps the NATS error and adds the cause found for it.
type connectError struct {
	desc  string
	cause error
	err   error
}

func (e *connectError) Error() string {
	if e.cause == nil {
		return secret.Redact("natsconn: connect " + e.desc + ": " + e.err.Error())
	}
	return secret.Redact("natsconn: connect " + e.desc + ": " + e.cause.Error() + " (" + e.err.Error() + ")")
}

func (e *connectError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.err}
	}
	return []error{e.cause, e.err}
}

// explain finds the likely cause of a connect error.
func (o *Options) explain(err error) error {
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var certErr *tls.CertificateVerificationError
	msg := strings.ToLower(err.Error())
	var cause error
	switch {
	case errors.As(err, &unknownCA), strings.Contains(msg, "certificate signed by unknown authority"):
		cause = ErrTLSUnknownAuthority
	case errors.As(err, &hostname):
		cause = ErrTLSHostname
	case errors.As(err, &certErr):
		cause = ErrTLSUnknownAuthority
	case strings.Contains(msg, "certificate required") && o.TLSCert != "":
		// Go's TLS client sends no certificate that the server's list of
		// acceptable CAs excludes: the server then sees none.
		cause = ErrTLSClientCertRefused
	case strings.Contains(msg, "certificate required"):
		cause = ErrTLSClientCertRequired
	case strings.Contains(msg, "connection closed by remote after tls handshake") && o.TLSCert != "":
		// TLS 1.3: the client finishes its handshake before the server
		// checks the certificate, so a refusal may arrive as a closed
		// connection instead of an alert.
		cause = ErrTLSClientCertRefused
	case strings.Contains(msg, "connection closed by remote after tls handshake"):
		cause = ErrTLSClientCertRequired
	case strings.Contains(msg, "tls: unknown certificate authority"), strings.Contains(msg, "tls: bad certificate"),
		strings.Contains(msg, "tls: unsupported certificate"), strings.Contains(msg, "tls: certificate expired"):
		cause = ErrTLSClientCertRefused
	case errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted),
		strings.Contains(msg, "first record does not look like a tls handshake"):
		cause = ErrTLSRequired
	case errors.Is(err, nats.ErrAuthorization), strings.Contains(msg, "authorization violation"):
		cause = ErrAuthorization
	case errors.Is(err, nats.ErrNoServers), strings.Contains(msg, "connection refused"), strings.Contains(msg, "no such host"):
		cause = ErrUnreachable
	}
	return &connectError{desc: o.Describe(), cause: cause, err: err}
}

// Describe says, for logs, which servers and methods o uses, without any
// secret: "servers=nats://a:4222,nats://b:4222 auth=creds:/etc/x.creds
// tls=ca:/etc/ca.pem,client-cert:/etc/c.pem". Credentials inside a URL are
// redacted.
func (o *Options) Describe() string {
	urls := o.URLs()
	for i, u := range urls {
		urls[i] = redactURL(u)
	}
	auth := "none"
	switch {
	case o.Creds != "":
		auth = "creds:" + secret.Redact(o.Creds)
	case o.NKey != "":
		auth = "nkey:" + secret.Redact(o.NKey)
	case o.User != "":
		auth = "user:" + o.User
	case o.Token != "":
		auth = "token"
	}
	var tlsParts []string
	if o.TLSCA != "" {
		tlsParts = append(tlsParts, "ca:"+o.TLSCA)
	}
	if o.TLSCert != "" {
		tlsParts = append(tlsParts, "client-cert:"+o.TLSCert)
	}
	tlsDesc := "off"
	if len(tlsParts) > 0 {
		tlsDesc = strings.Join(tlsParts, ",")
	} else if strings.Contains(o.URL, "tls://") || strings.Contains(o.URL, "wss://") {
		tlsDesc = "system-roots"
	}
	d := "servers=" + strings.Join(urls, ",") + " auth=" + auth + " tls=" + tlsDesc
	if o.InboxPrefix != "" {
		d += " inbox=" + o.InboxPrefix
	}
	return d
}

// redactURL hides the credentials of a URL: a password, or a lone user
// part (a token).
func redactURL(raw string) string {
	s := raw
	scheme := ""
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, s = s[:i+3], s[i+3:]
	}
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return raw
	}
	userinfo, host := s[:at], s[at+1:]
	if i := strings.Index(userinfo, ":"); i >= 0 {
		return scheme + userinfo[:i] + ":xxxxx@" + host
	}
	return scheme + "xxxxx@" + host
}

// ReplyGrace is how long after a reconnect a refused answer is taken for
// one to a request received before it.
const ReplyGrace = time.Minute

// replyRefusals tells the refusals a reconnect brings from other errors.
// Under roles (NATS allow_responses) a client may publish to a reply
// subject only if it received the request on its own connection, and the
// server that checks is the one the connection is on: answers to requests
// taken before a reconnect to another server are refused there, one
// "Permissions Violation for Publish to _INBOX..." per answer. That is
// expected (the callers retry), not an error to page on.
type replyRefusals struct {
	mu sync.Mutex
	at time.Time // the last reconnect
	n  int       // refusals counted since
}

func (r *replyRefusals) reconnected(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at, r.n = now, 0
}

// count returns 0 if err is not a refused answer within ReplyGrace of a
// reconnect, else how many there were since that reconnect, err included.
func (r *replyRefusals) count(err error, now time.Time) int {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return 0
	}
	msg := err.Error()
	i := strings.Index(msg, "for Publish to ")
	if i < 0 {
		return 0
	}
	subject := strings.Trim(msg[i+len("for Publish to "):], `"`)
	if !strings.HasPrefix(subject, "_INBOX") && !strings.HasPrefix(subject, "_R_.") {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at.IsZero() || now.Sub(r.at) > ReplyGrace {
		return 0
	}
	r.n++
	return r.n
}
