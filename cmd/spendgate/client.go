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

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

type clientFlags struct {
	url     string
	prefix  string
	timeout time.Duration
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	def := os.Getenv("SPENDGATE_NATS_URL")
	if def == "" {
		def = "nats://127.0.0.1:4222"
	}
	fs.StringVar(&c.url, "nats-url", def, "NATS server URL ($SPENDGATE_NATS_URL)")
	fs.StringVar(&c.prefix, "prefix", streams.DefaultPrefix, "service subject prefix")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "request timeout")
}

// call sends req to endpoint and prints the reply. It returns the exit code
// and the decoded reply body.
func (c *clientFlags) call(endpoint string, req any, out any) int {
	nc, err := nats.Connect(c.url, nats.Name("spendgate-cli"), nats.Timeout(c.timeout))
	if err != nil {
		fmt.Fprintf(os.Stderr, "spendgate: connect %s: %v\n", c.url, err)
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
	var pretty any
	if json.Unmarshal(msg.Data, &pretty) == nil {
		b, _ := json.MarshalIndent(pretty, "", "  ")
		fmt.Println(string(b))
	} else {
		fmt.Println(string(msg.Data))
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

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func budget(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, "usage: spendgate budget put|get|list [flags]\n")
		return 1
	}
	var c clientFlags
	fs := flag.NewFlagSet("budget "+args[0], flag.ContinueOnError)
	c.register(fs)
	switch args[0] {
	case "put":
		var req events.BudgetPutRequest
		fs.StringVar(&req.Scope, "scope", "", "scope, kind:id (e.g. org:acme)")
		fs.StringVar(&req.Period, "period", "month", "month, day or lifetime (UTC)")
		fs.StringVar(&req.Limit, "limit", "", "limit, a decimal string")
		fs.StringVar(&req.Unit, "unit", "USD", "currency (USD, EUR, ...) or requests")
		if fs.Parse(args[1:]) != nil {
			return 1
		}
		return c.call(streams.EndpointBudgetPut, req, nil)
	case "get":
		var req events.BudgetGetRequest
		fs.StringVar(&req.Scope, "scope", "", "scope, kind:id")
		fs.StringVar(&req.Period, "period", "month", "month, day or lifetime")
		if fs.Parse(args[1:]) != nil {
			return 1
		}
		return c.call(streams.EndpointBudgetGet, req, nil)
	case "list":
		var req events.BudgetListRequest
		fs.StringVar(&req.Kind, "kind", "", "only scopes of this kind")
		if fs.Parse(args[1:]) != nil {
			return 1
		}
		return c.call(streams.EndpointBudgetList, req, nil)
	}
	fmt.Fprintf(os.Stderr, "spendgate: unknown budget command %q\n", args[0])
	return 1
}

func admitCmd(args []string) int {
	var c clientFlags
	fs := flag.NewFlagSet("admit", flag.ContinueOnError)
	c.register(fs)
	var req events.AdmitRequest
	var scopes multiFlag
	fs.Var(&scopes, "scope", "scope kind:id; repeat for several (reserved in all or none)")
	fs.StringVar(&req.Amount, "amount", "", "amount to reserve, a decimal string")
	fs.StringVar(&req.Unit, "unit", "", "currency of the amount (default USD)")
	fs.StringVar(&req.TTL, "ttl", "", "reservation TTL, e.g. 30s (default 5m)")
	fs.StringVar(&req.RequestID, "request-id", "", "idempotency key (default: a new UUID)")
	if fs.Parse(args) != nil {
		return 1
	}
	req.Scopes = scopes
	if req.RequestID == "" {
		req.RequestID = uuid.NewString()
	}
	var reply events.AdmitReply
	if code := c.call(streams.EndpointAdmit, req, &reply); code != 0 {
		return code
	}
	if !reply.Admitted {
		return 2
	}
	return 0
}

func settleCmd(args []string) int {
	var c clientFlags
	fs := flag.NewFlagSet("settle", flag.ContinueOnError)
	c.register(fs)
	var req events.SettleRequest
	fs.StringVar(&req.ReservationID, "reservation", "", "reservation id")
	fs.StringVar(&req.Actual, "actual", "", "actual cost, a decimal string")
	if fs.Parse(args) != nil {
		return 1
	}
	return c.call(streams.EndpointSettle, req, nil)
}

func releaseCmd(args []string) int {
	var c clientFlags
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	c.register(fs)
	var req events.ReleaseRequest
	fs.StringVar(&req.ReservationID, "reservation", "", "reservation id")
	if fs.Parse(args) != nil {
		return 1
	}
	return c.call(streams.EndpointRelease, req, nil)
}
