package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/natsconn"
	"github.com/spendgate/spendgate/streams"
)

// clientFlags are the flags of every command that talks to a running
// service.
type clientFlags struct {
	conn    natsconn.Options
	prefix  string
	timeout time.Duration
}

// register declares the connection flags (--nats-url, --creds, --nkey,
// --user, --password, --token, --tls-ca, --tls-cert, --tls-key,
// --inbox-prefix; defaults from NATS_* variables), --prefix and --timeout.
func (c *clientFlags) register(fs *flag.FlagSet) {
	c.conn.RegisterFlags(fs)
	fs.StringVar(&c.prefix, "prefix", streams.DefaultPrefix, "service subject prefix")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "request timeout")
}

// connect dials NATS as the flags say, under the connection name name.
func (c *clientFlags) connect(name string) (*nats.Conn, error) {
	return c.conn.Connect(name, nats.Timeout(c.timeout))
}

// call sends req to endpoint and prints the reply. It returns the exit code
// and the decoded reply body.
// fetch is call without printing a successful reply: an error reply is
// printed and exits 1, a reply is decoded into out.
func (c *clientFlags) fetch(endpoint string, req any, out any) int {
	nc, err := c.connect("spendgate-cli")
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return 1
	}
	defer nc.Close()
	data, err := json.Marshal(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, c.prefix+endpoint, data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			err = fmt.Errorf("no spendgate service is listening on %s%s", c.prefix, endpoint)
		}
		fmt.Fprintf(os.Stderr, "spendgate: %s: %v\n", endpoint, err)
		return 1
	}
	var er events.ErrorReply
	if json.Unmarshal(msg.Data, &er) == nil && er.Error != nil {
		fmt.Fprintln(os.Stdout, string(msg.Data))
		return 1
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %s: %v\n", endpoint, err)
		return 1
	}
	return 0
}

// call sends req to endpoint, prints the reply and decodes it into out.
func (c *clientFlags) call(endpoint string, req any, out any) int {
	nc, err := c.connect("spendgate-cli")
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return 1
	}
	defer nc.Close()
	data, err := json.Marshal(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, c.prefix+endpoint, data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			err = fmt.Errorf("no spendgate service is listening on %s%s", c.prefix, endpoint)
		}
		fmt.Fprintf(os.Stderr, "spendgate: %s: %v\n", endpoint, err)
		return 1
	}
	printed := msg.Data
	var pretty any
	if json.Unmarshal(msg.Data, &pretty) == nil {
		if b, err := json.MarshalIndent(pretty, "", "  "); err == nil {
			printed = b
		}
	}
	if _, err := fmt.Fprintln(os.Stdout, string(printed)); err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: %s: write the reply: %v\n", endpoint, err)
		return 1
	}
	var er events.ErrorReply
	if json.Unmarshal(msg.Data, &er) == nil && er.Error != nil {
		return 1
	}
	if out != nil {
		_ = json.Unmarshal(msg.Data, out)
	}
	return 0
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }
