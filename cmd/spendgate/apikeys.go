package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

var (
	keysCommand = command{
		name:     "spendgate keys",
		synopsis: "create|list|get|update|disable|enable|rotate [flags]",
		about: `Manages the API keys of spendgate gateway, kept in the ledger (only the SHA-256
of each secret is stored):

  create   make a key: its secret is printed once, here, and never again
  list     every key (id, prefix, scopes, state; never a hash)
  get      one key
  update   change a key's scopes, HTTP API access, name, end-user or run kind
  disable  refuse the key (a gateway notices within its --key-cache bound)
  enable   accept a disabled key again
  rotate   give a key a new secret: the old one stops working`,
	}
	keysCreateCommand = command{
		name:     "spendgate keys create",
		synopsis: "[--scope KIND:ID ...] [--budget DECIMAL [--period month] [--unit USD]] [--tenant NAME] [--access service|admin] [--name TEXT] [--end-user KIND] [--run KIND] [--secret-only]",
		about: `Makes a key and prints it with its secret ("secret"), which is shown only now.
It needs at least one of --scope (repeatable), --budget and --access.
Every gateway call made with the key is admitted against its scopes, all of
them or none. --budget also gives the key a budget of its own: the scope
key:<id> is added to its scopes and a budget of --budget per --period is put
for it (before the key exists, so the key never runs without it). --tenant
makes the key's calls the tenant's (its scopes are the tenant's names).
--access lets the key call the HTTP API (service: admit, settle, release,
void, batches, budget.get/list, pricing.get/list, report; admin: also
budget.put, budget.retire and pricing.put). --end-user KIND makes every gateway call of the
key name its end user (OpenAI's "user", Anthropic's metadata.user_id, or the
X-Spendgate-End-User header) and admits it against KIND:<end user> too, so
each end user's budget (or a default budget for KIND) caps it; a call that
names none is refused. --run KIND likewise makes every gateway call name its
run (an agent run, a job) in the X-Spendgate-Run header and admits it
against KIND:<run> too, so each run's budget (or a default budget for KIND)
caps it; a call that names none is refused. --secret-only prints the secret
alone.`,
	}
	keysIDCommands = map[string]command{
		"get":     {name: "spendgate keys get", synopsis: "--id ID", about: "Prints a key (never its hash)."},
		"disable": {name: "spendgate keys disable", synopsis: "--id ID", about: "Disables a key: a gateway refuses it (401 key_disabled) within its --key-cache bound."},
		"enable":  {name: "spendgate keys enable", synopsis: "--id ID", about: "Enables a disabled key again."},
	}
	keysRotateCommand = command{
		name:     "spendgate keys rotate",
		synopsis: "--id ID [--secret-only]",
		about:    "Gives a key a new secret, printed once; the old secret stops working (within a\ngateway's --key-cache bound). The scopes stay.",
	}
	keysUpdateCommand = command{
		name:     "spendgate keys update",
		synopsis: "--id ID [--scope KIND:ID ...] [--access service|admin|none] [--name TEXT] [--end-user KIND|none] [--run KIND|none]",
		about: `Changes a key: the flags given replace the key's, the others stay (its secret
and tenant always do). --scope, repeated, is the whole new list of scopes
(to give the key a budget of its own, put one for key:<id> and add that
scope); --access none takes its HTTP API access away, --end-user none its
end-user scope, --run none its run scope (see keys create). A gateway uses
the change within its --key-cache bound.`,
	}
	keysListCommand = command{
		name:     "spendgate keys list",
		synopsis: "",
		about:    "Prints every key, sorted by id.",
	}
)

// keysCmd is spendgate keys create|list|get|disable|enable|rotate.
func keysCmd(args []string) int {
	if len(args) == 0 || len(args[0]) > 0 && args[0][0] == '-' {
		fs := newFlagSet("keys")
		if code, ok := keysCommand.parse(fs, args); !ok {
			return code
		}
		return keysCommand.usageError(fs, "which keys command? (create, list, get, update, disable, enable or rotate)")
	}
	var c clientFlags
	fs := newFlagSet("keys " + args[0])
	c.register(fs)
	switch args[0] {
	case "create":
		var req events.APIKeyCreateRequest
		var scopes multiFlag
		fs.Var(&scopes, "scope", "a scope every call of the key is admitted against (repeatable)")
		limit := fs.String("budget", "", "also put a budget of this limit for the key's own scope key:<id>")
		period := fs.String("period", "month", "period of --budget: month, week, day, hour, minute or lifetime")
		unit := fs.String("unit", "USD", "unit of --budget")
		fs.StringVar(&req.Tenant, "tenant", "", "the tenant the key's calls belong to")
		fs.StringVar(&req.Access, "access", "", "HTTP API access: service or admin (default: the gateway's proxy only)")
		fs.StringVar(&req.Name, "name", "", "a label for listings")
		fs.StringVar(&req.EndUser, "end-user", "", "a scope kind, like user: every call names its end user and is admitted against KIND:<end user> too")
		fs.StringVar(&req.Run, "run", "", "a scope kind, like run: every call names its run in the X-Spendgate-Run header and is admitted against KIND:<run> too")
		secretOnly := fs.Bool("secret-only", false, "print only the secret")
		if code, ok := keysCreateCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if len(scopes) == 0 && *limit == "" && req.Access == "" {
			return keysCreateCommand.usageError(fs, "--scope is required (or --budget, the key's own budget, or --access for the HTTP API)")
		}
		id, secret, err := events.NewAPIKey()
		if err != nil {
			fmt.Fprintln(os.Stderr, "spendgate keys create:", err)
			return exitError
		}
		req.ID, req.Hash, req.Scopes = id, events.HashAPIKey(secret), scopes
		if *limit != "" {
			own := "key:" + id
			req.Scopes = append(req.Scopes, own)
			b := c
			b.tenant = req.Tenant
			var put events.BudgetPutReply
			if code := b.fetch(streams.EndpointBudgetPut, events.BudgetPutRequest{Scope: own, Period: *period, Limit: *limit, Unit: *unit}, &put); code != 0 {
				return code
			}
		}
		var reply events.APIKeyPutReply
		if code := c.fetch(streams.EndpointAPIKeyCreate, req, &reply); code != 0 {
			return code
		}
		return printKey(secret, reply.APIKeyView, *secretOnly)
	case "rotate":
		var req events.APIKeyRotateRequest
		fs.StringVar(&req.ID, "id", "", "the key's id")
		secretOnly := fs.Bool("secret-only", false, "print only the new secret")
		if code, ok := keysRotateCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if code, ok := keysRotateCommand.require(fs, "id"); !ok {
			return code
		}
		if err := events.ValidateKeyID(req.ID); err != nil {
			return keysRotateCommand.usageError(fs, "--id: "+err.Error())
		}
		_, fresh, err := events.NewAPIKey()
		if err != nil {
			fmt.Fprintln(os.Stderr, "spendgate keys rotate:", err)
			return exitError
		}
		// The same id, a new random part.
		secret := events.APIKeyPrefix + req.ID + fresh[len(events.APIKeyPrefix)+events.APIKeyIDLen:]
		req.Hash = events.HashAPIKey(secret)
		var reply events.APIKeyPutReply
		if code := c.fetch(streams.EndpointAPIKeyRotate, req, &reply); code != 0 {
			return code
		}
		return printKey(secret, reply.APIKeyView, *secretOnly)
	case "update":
		req := events.APIKeyUpdateRequest{}
		var scopes multiFlag
		fs.StringVar(&req.ID, "id", "", "the key's id")
		fs.Var(&scopes, "scope", "the key's scopes, all of them (repeatable)")
		access := fs.String("access", "", "HTTP API access: service, admin or none")
		name := fs.String("name", "", "a label for listings")
		endUser := fs.String("end-user", "", "the end-user scope kind, like user, or none")
		run := fs.String("run", "", "the run scope kind, like run, or none")
		if code, ok := keysUpdateCommand.parse(fs, args[1:]); !ok {
			return code
		}
		if code, ok := keysUpdateCommand.require(fs, "id"); !ok {
			return code
		}
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "scope":
				req.Scopes = new([]string(scopes))
			case "access":
				a := *access
				if a == "none" {
					a = events.AccessNone
				}
				req.Access = &a
			case "name":
				req.Name = name
			case "end-user":
				k := *endUser
				if k == "none" {
					k = ""
				}
				req.EndUser = &k
			case "run":
				k := *run
				if k == "none" {
					k = ""
				}
				req.Run = &k
			}
		})
		if req.Scopes == nil && req.Access == nil && req.Name == nil && req.EndUser == nil && req.Run == nil {
			return keysUpdateCommand.usageError(fs, "nothing to change: give --scope, --access, --name, --end-user or --run")
		}
		return c.call(streams.EndpointAPIKeyUpdate, req, nil)
	case "get", "disable", "enable":
		var req events.APIKeyIDRequest
		fs.StringVar(&req.ID, "id", "", "the key's id")
		cmd := keysIDCommands[args[0]]
		if code, ok := cmd.parse(fs, args[1:]); !ok {
			return code
		}
		if code, ok := cmd.require(fs, "id"); !ok {
			return code
		}
		endpoint := map[string]string{"get": streams.EndpointAPIKeyGet, "disable": streams.EndpointAPIKeyDisable,
			"enable": streams.EndpointAPIKeyEnable}[args[0]]
		return c.call(endpoint, req, nil)
	case "list":
		if code, ok := keysListCommand.parse(fs, args[1:]); !ok {
			return code
		}
		return c.call(streams.EndpointAPIKeyList, events.APIKeyListRequest{}, nil)
	}
	return keysCommand.usageError(nil, fmt.Sprintf("unknown keys command %q", args[0]))
}

// printKey prints a key with its secret, or the secret alone.
func printKey(secret string, v events.APIKeyView, secretOnly bool) int {
	if secretOnly {
		fmt.Println(secret)
		return exitOK
	}
	b, err := json.MarshalIndent(struct {
		Secret string `json:"secret"`
		events.APIKeyView
	}{secret, v}, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "spendgate keys:", err)
		return exitError
	}
	fmt.Println(string(b))
	return exitOK
}
