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
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/natsconn"
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

// register declares the connection flags (--nats-url, --creds, --nkey,
// --user, --password, --token, --tls-ca, --tls-cert, --tls-key,
// --inbox-prefix; defaults from NATS_* variables), --prefix and --timeout.
func (c *clientFlags) register(fs *flag.FlagSet) {
	registerConnection(fs, &c.conn)
	fs.StringVar(&c.prefix, "prefix", streams.DefaultPrefix, "service subject prefix")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "request timeout")
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

// request sends req to endpoint and returns the reply's body, or prints
// why it could not (connection, encoding, no responder, timeout) and
// returns ok false.
func (c *clientFlags) request(endpoint string, req any) (body []byte, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	// The server refuses a publish or a reply subscription this login's
	// permissions do not allow by an asynchronous error, and no reply
	// ever comes: say so at once instead of waiting out the timeout.
	var refused atomic.Pointer[error]
	nc, err := c.connect("spendgate-cli", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			refused.CompareAndSwap(nil, &err)
			cancel()
		}
	}))
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return nil, false
	}
	defer nc.Close()
	data, err := json.Marshal(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return nil, false
	}
	subject, err := c.subject(endpoint)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return nil, false
	}
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			err = fmt.Errorf("no spendgate service is listening on %s", subject)
		}
		if p := refused.Load(); p != nil {
			err = fmt.Errorf("refused by the NATS server, this login may not do it (its role: spendgate roles): %v", *p)
		}
		fmt.Fprintf(os.Stderr, "spendgate: %s: %v\n", endpoint, err)
		return nil, false
	}
	return msg.Data, true
}

// isErrorReply says whether body is an error reply.
func isErrorReply(body []byte) bool {
	var er events.ErrorReply
	return json.Unmarshal(body, &er) == nil && er.Error != nil
}

// fetch is call without printing a successful reply: an error reply is
// printed and exits 1, a reply is decoded into out.
func (c *clientFlags) fetch(endpoint string, req any, out any) int {
	body, ok := c.request(endpoint, req)
	if !ok {
		return 1
	}
	if isErrorReply(body) {
		printReply(os.Stdout, endpoint, body)
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
