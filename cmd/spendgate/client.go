package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
)

// clientFlags are the flags of every command that talks to a running
// service.
type clientFlags struct {
	conn    natsconn.Options
	prefix  string
	tenant  string
	timeout time.Duration
}

// cliTimeout is the commands' default --timeout: longer than a replica
// takes to answer ledger_unavailable when it cannot serve a request in
// time (service.RequestTimeout), so that the answer, with its code, comes
// back rather than a timeout with none.
const cliTimeout = service.RequestTimeout + 2*time.Second

// register declares the connection flags (--nats-url, --creds, --nkey,
// --user, --password, --token, --tls-ca, --tls-cert, --tls-key,
// --inbox-prefix; defaults from NATS_* variables), --prefix and --timeout.
func (c *clientFlags) register(fs *flag.FlagSet) {
	registerConnection(fs, &c.conn)
	fs.StringVar(&c.prefix, "prefix", streams.DefaultPrefix, "service subject prefix")
	fs.DurationVar(&c.timeout, "timeout", cliTimeout, "request timeout")
}

// registerTenant declares --tenant, for the commands that call endpoints.
func (c *clientFlags) registerTenant(fs *flag.FlagSet) {
	fs.StringVar(&c.tenant, "tenant", "", "act for this tenant, on <prefix>t.<tenant>.<endpoint> (an operator's admin identity; a tenant's own identity needs no flag)")
}

// subject is the subject of endpoint: "<prefix><endpoint>", or with
// --tenant "<prefix>t.<tenant>.<endpoint>".
func (c *clientFlags) subject(endpoint string) (string, error) {
	if c.tenant == "" {
		return c.prefix + endpoint, nil
	}
	if err := events.ValidateTenant(c.tenant); err != nil {
		return "", fmt.Errorf("--tenant: %w", err)
	}
	return c.prefix + streams.TenantToken + "." + c.tenant + "." + endpoint, nil
}

// connect dials NATS as the flags say, under the connection name name.
func (c *clientFlags) connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	return c.conn.Connect(name, append([]nats.Option{nats.Timeout(c.timeout)}, opts...)...)
}

// cliConn is a command's connection: requests one at a time, each bounded
// by --timeout, ended at once when the server refuses what this login may
// not do.
type cliConn struct {
	c  *clientFlags
	nc *nats.Conn
	// refused is the server's first permissions violation; cancel ends
	// the request in flight.
	refused atomic.Pointer[error]
	mu      sync.Mutex
	cancel  context.CancelFunc
}

// dial connects as the flags say. The server refuses a publish or a reply
// subscription this login's permissions do not allow by an asynchronous
// error, and no reply ever comes: the request in flight ends at once, and
// says so, instead of waiting out the timeout.
func (c *clientFlags) dial() (*cliConn, error) {
	cc := &cliConn{c: c}
	nc, err := c.connect("spendgate-cli", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			cc.refused.CompareAndSwap(nil, &err)
			cc.mu.Lock()
			if cc.cancel != nil {
				cc.cancel()
			}
			cc.mu.Unlock()
		}
	}))
	if err != nil {
		return nil, err
	}
	cc.nc = nc
	return cc, nil
}

// roundTrip sends data to endpoint and returns the reply's body, or an
// error that says why none came (no responder, refused, timeout).
func (cc *cliConn) roundTrip(endpoint string, data []byte) ([]byte, error) {
	subject, err := cc.c.subject(endpoint)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cc.c.timeout)
	defer cancel()
	cc.mu.Lock()
	cc.cancel = cancel
	cc.mu.Unlock()
	if cc.refused.Load() != nil {
		cancel()
	}
	msg, err := cc.nc.RequestWithContext(ctx, subject, data)
	switch p := cc.refused.Load(); {
	case err == nil:
		return msg.Data, nil
	case p != nil:
		return nil, fmt.Errorf("refused by the NATS server, this login may not do it (its role: spendgate roles): %v", *p)
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("no spendgate service is listening on %s", subject)
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("no answer within --timeout %s: no replica answered in time (a replica that cannot serve answers ledger_unavailable within %s; see its log)", cc.c.timeout, service.RequestTimeout)
	}
	return nil, err
}

// request sends req to endpoint and returns the reply's body, or prints
// why it could not (connection, encoding, no responder, refused, timeout)
// and returns ok false.
func (c *clientFlags) request(endpoint string, req any) (body []byte, ok bool) {
	data, err := json.Marshal(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return nil, false
	}
	cc, err := c.dial()
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return nil, false
	}
	defer cc.nc.Close()
	body, err = cc.roundTrip(endpoint, data)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %s: %v\n", endpoint, err)
		return nil, false
	}
	return body, true
}

// isErrorReply says whether body is an error reply.
func isErrorReply(body []byte) bool {
	var er events.ErrorReply
	return json.Unmarshal(body, &er) == nil && er.Error != nil
}

// fetch is call without printing a successful reply: an error reply is
// printed to stderr and exits 1, a reply is decoded into out. Its caller's
// stdout is something made from the reply (a secret, a CSV), which a
// script captures or redirects: an error there would be taken for it
// (KEY=$(spendgate keys create ... --secret-only) holding the error).
func (c *clientFlags) fetch(endpoint string, req any, out any) int {
	body, ok := c.request(endpoint, req)
	if !ok {
		return 1
	}
	if isErrorReply(body) {
		printReply(os.Stderr, endpoint, body)
		return 1
	}
	if err := json.Unmarshal(body, out); err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %s: %v\n", endpoint, err)
		return 1
	}
	return 0
}

// call sends req to endpoint, prints the reply (indented) and decodes it
// into out. It returns the exit code: 1 on an error reply.
func (c *clientFlags) call(endpoint string, req any, out any) int {
	body, ok := c.request(endpoint, req)
	if !ok {
		return 1
	}
	if !printReply(os.Stdout, endpoint, body) {
		return 1
	}
	if isErrorReply(body) {
		return 1
	}
	if out != nil {
		_ = json.Unmarshal(body, out)
	}
	return 0
}

// printReply writes a reply to w, indented, its keys in the order the
// service wrote them (the wire structs' order, which every command's JSON
// output follows), and says whether the write succeeded.
func printReply(w io.Writer, endpoint string, body []byte) bool {
	var b bytes.Buffer
	if json.Indent(&b, bytes.TrimSpace(body), "", "  ") != nil {
		b.Reset()
		b.Write(body)
	}
	b.WriteByte('\n')
	if _, err := w.Write(b.Bytes()); err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %s: write the reply: %v\n", endpoint, err)
		return false
	}
	return true
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
