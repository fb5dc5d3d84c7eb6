package streams

import "strings"

// API keys of the gateway: each key's hash, scopes and state live in the
// ledger bucket under "apikey.<id>", one chained revision per change, like
// a model's prices under "pricing.<model>".
const apiKeyFamily = "apikey"

// APIKeyKey is "apikey.<id>": the key of an API key's definition (an id
// is a token: one subject token; see events.ValidateKeyID).
func APIKeyKey(id string) string { return apiKeyFamily + "." + id }

// IsAPIKeyKey reports whether key is an API key's key.
func IsAPIKeyKey(key string) bool { return strings.HasPrefix(key, apiKeyFamily+".") }

// The API key endpoints, under the prefix. Only the deployment's
// administration reaches them: they have no tenant subjects (a key names
// its tenant in its definition).
const (
	// EndpointAPIKeyCreate stores a new key's hash and scopes.
	EndpointAPIKeyCreate = "apikey.create"
	// EndpointAPIKeyRotate replaces a key's hash.
	EndpointAPIKeyRotate = "apikey.rotate"
	// EndpointAPIKeyUpdate changes a key's scopes, HTTP API access, name,
	// end-user or run kind.
	EndpointAPIKeyUpdate = "apikey.update"
	// EndpointAPIKeyDisable and EndpointAPIKeyEnable switch a key off
	// and on.
	EndpointAPIKeyDisable = "apikey.disable"
	EndpointAPIKeyEnable  = "apikey.enable"
	// EndpointAPIKeyGet and EndpointAPIKeyList read keys, never their
	// hashes.
	EndpointAPIKeyGet  = "apikey.get"
	EndpointAPIKeyList = "apikey.list"
	// EndpointAPIKeyResolve answers a key id and the hash of a presented
	// secret with the key's scopes, or unknown_key / key_disabled: what a
	// gateway asks for every key it has not cached.
	EndpointAPIKeyResolve = "apikey.resolve"
)

// APIKeyEndpoints are the API key endpoints.
var APIKeyEndpoints = []string{EndpointAPIKeyCreate, EndpointAPIKeyRotate, EndpointAPIKeyUpdate, EndpointAPIKeyDisable, EndpointAPIKeyEnable,
	EndpointAPIKeyGet, EndpointAPIKeyList, EndpointAPIKeyResolve}
