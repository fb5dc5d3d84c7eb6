package events

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// API keys: the gateway's callers present a secret; the ledger keeps, under
// the key's own KV key (see streams.APIKeyKey), only the SHA-256 of that
// secret, the scopes every call made with it is admitted against, and the
// key's state, one revision per change chained like a pricing revision.
// The secret itself is made by whoever creates the key (spendgate keys
// create) and is shown once: it never travels to the ledger.

// TypeAPIKeyDefined is the type of APIKeyDefined.
const TypeAPIKeyDefined Type = "apikey.defined.v1"

// SchemaAPIKey is the schema of an API key revision.
const SchemaAPIKey = "apikey.v1"

// Error codes of the API key endpoints.
const (
	// CodeUnknownKey: no key has this id, or the presented secret's hash
	// is not the key's (the two are not told apart).
	CodeUnknownKey Code = "unknown_key"
	// CodeKeyDisabled: the key exists and matches, but is disabled.
	CodeKeyDisabled Code = "key_disabled"
	// CodeKeyExists: apikey.create of an id that is already taken.
	CodeKeyExists Code = "key_exists"
	// CodeKeyForbidden: a keyed request (KeyedRequest) whose key's access
	// does not reach the endpoint: budget.put, budget.retire and
	// pricing.put need AccessAdmin.
	CodeKeyForbidden Code = "key_forbidden"
)

// KeyedRequest is a request made on behalf of the holder of an API key,
// on the keyed subjects (streams.EndpointKeyedBudgetPut,
// streams.EndpointKeyedPricingPut): Key is the key's secret, which the
// replica checks against the ledger's key table, and Request the
// endpoint's own request body, which it runs for the key's tenant.
type KeyedRequest struct {
	Key     string          `json:"key"`
	Request json.RawMessage `json:"request"`
}

// HTTP API access of a key (APIKeyDefined.Access).
const (
	// AccessNone: the key calls the gateway's proxy only (the default).
	AccessNone = ""
	// AccessService: the key may also call the HTTP API's admit, settle,
	// release, void, their batches, budget.get, budget.list,
	// pricing.get, pricing.list and report, for its tenant.
	AccessService = "service"
	// AccessAdmin: AccessService and budget.put, budget.retire and
	// pricing.put.
	AccessAdmin = "admin"
)

// Limits and the format of API keys.
const (
	// APIKeyPrefix starts every secret: "sgk_<id>_<64 hex digits>".
	APIKeyPrefix = "sgk_"
	// APIKeyIDLen is the length of a generated key id (hex digits).
	APIKeyIDLen = 12
	// MaxKeyIDLen bounds a key id.
	MaxKeyIDLen = 64
	// MaxKeyNameLen bounds a key's name.
	MaxKeyNameLen = 128
	// apiKeySecretBytes is the randomness of a secret.
	apiKeySecretBytes = 32
)

// NewAPIKey makes a key id and its secret from crypto/rand.
func NewAPIKey() (id, secret string, err error) {
	b := make([]byte, APIKeyIDLen/2+apiKeySecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("events: random key: %w", err)
	}
	id = hex.EncodeToString(b[:APIKeyIDLen/2])
	return id, APIKeySecret(id, b[APIKeyIDLen/2:]), nil
}

// APIKeySecret is the secret of key id with random part r.
func APIKeySecret(id string, r []byte) string {
	return APIKeyPrefix + id + "_" + hex.EncodeToString(r)
}

// ParseAPIKey returns the key id a secret names, or false if it is not
// of the form APIKeyPrefix + id + "_" + secret.
func ParseAPIKey(secret string) (id string, ok bool) {
	rest, ok := strings.CutPrefix(secret, APIKeyPrefix)
	if !ok {
		return "", false
	}
	id, s, ok := strings.Cut(rest, "_")
	if !ok || s == "" || ValidateKeyID(id) != nil {
		return "", false
	}
	return id, true
}

// HashAPIKey is what the ledger stores of a secret: hex SHA-256.
func HashAPIKey(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// ValidateKeyID checks a key id: 1..MaxKeyIDLen lower-case letters and
// digits (one KV key token). Errors: CodeInvalidIdentifier.
func ValidateKeyID(id string) error {
	if id == "" {
		return Errorf(CodeInvalidIdentifier, "key id is empty")
	}
	if len(id) > MaxKeyIDLen {
		return Errorf(CodeInvalidIdentifier, "key id is longer than %d characters", MaxKeyIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return Errorf(CodeInvalidIdentifier, "key id %q may hold only lower-case letters and digits", id)
		}
	}
	return nil
}

// ValidateKeyHash checks a secret's hash: 64 lower-case hex digits.
// Errors: CodeInvalidRequest.
func ValidateKeyHash(h string) error {
	if len(h) != 2*sha256.Size {
		return Errorf(CodeInvalidRequest, "hash must be the SHA-256 of the secret in 64 lower-case hex digits")
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= 'a' && c <= 'f' || c >= '0' && c <= '9') {
			return Errorf(CodeInvalidRequest, "hash must be the SHA-256 of the secret in 64 lower-case hex digits")
		}
	}
	return nil
}

// ValidateAccess checks a key's HTTP API access. Errors: CodeInvalidRequest.
func ValidateAccess(a string) error {
	switch a {
	case AccessNone, AccessService, AccessAdmin:
		return nil
	}
	return Errorf(CodeInvalidRequest, "access must be \"\", %q or %q, not %q", AccessService, AccessAdmin, a)
}

// APIKeyDefined: an API key was created or changed. It is the key's whole
// definition after the change; Changed names what changed (hash: rotated;
// disabled: switched off or on), empty for a new key.
type APIKeyDefined struct {
	ID     string   `json:"id"`
	Hash   string   `json:"hash"`
	Scopes []string `json:"scopes"`
	Tenant string   `json:"tenant,omitempty"`
	Access string   `json:"access,omitempty"`
	Name   string   `json:"name,omitempty"`
	// EndUser is the key's end-user scope kind (APIKeyCreateRequest).
	EndUser string `json:"end_user,omitempty"`
	// Run is the key's run scope kind (APIKeyCreateRequest).
	Run string `json:"run,omitempty"`
	// Disabled keys are refused (key_disabled).
	Disabled bool      `json:"disabled,omitempty"`
	Changed  []string  `json:"changed,omitempty"`
	At       time.Time `json:"at"`
}

// EventType returns TypeAPIKeyDefined.
func (APIKeyDefined) EventType() Type { return TypeAPIKeyDefined }

// APIKeyRevision is the value of an API key's key: its definition after
// the revision, chained to the key's previous revision, and the event that
// made it.
type APIKeyRevision struct {
	Schema string `json:"schema"`
	Chain
	ID        string     `json:"id"`
	Hash      string     `json:"hash"`
	Scopes    []string   `json:"scopes"`
	Tenant    string     `json:"tenant,omitempty"`
	Access    string     `json:"access,omitempty"`
	Name      string     `json:"name,omitempty"`
	EndUser   string     `json:"end_user,omitempty"`
	Run       string     `json:"run,omitempty"`
	Disabled  bool       `json:"disabled,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RotatedAt *time.Time `json:"rotated_at,omitempty"`
	Events    Events     `json:"events"`
}

// DecodeAPIKeyRevision decodes an API key revision (schema apikey.v1).
func DecodeAPIKeyRevision(data []byte) (APIKeyRevision, error) {
	var r APIKeyRevision
	if err := json.Unmarshal(data, &r); err != nil {
		return r, err
	}
	if r.Schema != SchemaAPIKey {
		return r, fmt.Errorf("events: schema %q under an API key's key, want %q", r.Schema, SchemaAPIKey)
	}
	return r, nil
}

// APIKeyCreateRequest stores a new key (apikey.create). The caller makes
// the secret (NewAPIKey) and sends its id and HashAPIKey.
type APIKeyCreateRequest struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
	// Scopes are the scopes every gateway call made with the key is
	// admitted against ("kind:id", at most MaxScopes; the tenant's own
	// names when Tenant is set). A key without scopes may only call the
	// HTTP API (Access).
	Scopes []string `json:"scopes,omitempty"`
	// Tenant, when set, makes every call of the key a call of that
	// tenant (its admits go to the tenant's subjects).
	Tenant string `json:"tenant,omitempty"`
	// Access is the key's HTTP API access: AccessNone, AccessService or
	// AccessAdmin.
	Access string `json:"access,omitempty"`
	// Name is a free label for listings.
	Name string `json:"name,omitempty"`
	// EndUser, when set, is a scope kind ("user", "customer"): every
	// gateway call of the key names its end user (OpenAI's "user",
	// Anthropic's metadata.user_id, or the X-Spendgate-End-User header),
	// and is admitted against the scope "<kind>:<end user>" as well as
	// the key's own scopes (one fewer of them then: a call names at most
	// MaxScopes). A call that names none is refused.
	EndUser string `json:"end_user,omitempty"`
	// Run, when set, is a scope kind ("run"): every gateway call of the
	// key names its run (an agent run, a job) in the X-Spendgate-Run
	// header, and is admitted against the scope "<kind>:<run>" as well
	// as the key's own scopes and its end user's (one fewer of the key's
	// own then). A call that names none is refused.
	Run string `json:"run,omitempty"`
}

// APIKeyRotateRequest replaces a key's hash (apikey.rotate): the old
// secret stops working, the scopes stay.
type APIKeyRotateRequest struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
}

// APIKeyUpdateRequest changes a key (apikey.update): each field given
// replaces the key's, each left out stays. Scopes replaces the whole list
// (an empty list leaves a key with HTTP API access only); Access "" takes
// the key's HTTP API access away, EndUser "" its end-user scope, Run ""
// its run scope. The key's id, secret and tenant stay:
// rotate the secret with apikey.rotate, and make a new key for another
// tenant.
type APIKeyUpdateRequest struct {
	ID      string    `json:"id"`
	Scopes  *[]string `json:"scopes,omitempty"`
	Access  *string   `json:"access,omitempty"`
	Name    *string   `json:"name,omitempty"`
	EndUser *string   `json:"end_user,omitempty"`
	Run     *string   `json:"run,omitempty"`
}

// APIKeyIDRequest names one key: apikey.get, apikey.disable,
// apikey.enable.
type APIKeyIDRequest struct {
	ID string `json:"id"`
}

// APIKeyListRequest lists every key; it has no fields.
type APIKeyListRequest struct{}

// APIKeyResolveRequest asks for the key a presented secret opens: its id
// (ParseAPIKey) and the secret's HashAPIKey.
type APIKeyResolveRequest struct {
	ID   string `json:"id"`
	Hash string `json:"hash"`
}

// APIKeyView is a key as listings show it: never its hash. Prefix is the
// start of its secret ("sgk_<id>_"), by which a holder recognises it.
type APIKeyView struct {
	ID        string     `json:"id"`
	Prefix    string     `json:"prefix"`
	Scopes    []string   `json:"scopes"`
	Tenant    string     `json:"tenant,omitempty"`
	Access    string     `json:"access,omitempty"`
	Name      string     `json:"name,omitempty"`
	EndUser   string     `json:"end_user,omitempty"`
	Run       string     `json:"run,omitempty"`
	Disabled  bool       `json:"disabled,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	RotatedAt *time.Time `json:"rotated_at,omitempty"`
	// Version is the stream sequence of the key's current revision.
	Version uint64 `json:"version"`
}

// APIKeyPutReply is a key after create, rotate, update, disable or enable, and
// what changed (empty when nothing did, or on creation).
type APIKeyPutReply struct {
	APIKeyView
	Created bool     `json:"created,omitempty"`
	Changed []string `json:"changed"`
}

// APIKeyListReply lists every key, sorted by id.
type APIKeyListReply struct {
	Keys []APIKeyView `json:"keys"`
}

// APIKeyResolveReply is what a key opens.
type APIKeyResolveReply struct {
	ID      string   `json:"id"`
	Scopes  []string `json:"scopes"`
	Tenant  string   `json:"tenant,omitempty"`
	Access  string   `json:"access,omitempty"`
	EndUser string   `json:"end_user,omitempty"`
	Run     string   `json:"run,omitempty"`
	Version uint64   `json:"version"`
}
