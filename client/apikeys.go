package client

import (
	"context"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/streams"
)

// ResolveAPIKey asks which key a presented secret opens: req names the
// key's id (events.ParseAPIKey) and the secret's events.HashAPIKey; the
// secret itself is never sent. The reply holds the key's scopes, tenant and
// HTTP API access.
//
// Errors, in precedence order: an *events.Error (errors.As) with code
// unknown_key (no such key, or another secret: the two are not told
// apart), key_disabled, invalid_identifier or invalid_request; then an
// *UnavailableError matching ErrUnavailable; then ctx's error, wrapped.
func (c *Client) ResolveAPIKey(ctx context.Context, req events.APIKeyResolveRequest) (events.APIKeyResolveReply, error) {
	var v events.APIKeyResolveReply
	if err := c.request(ctx, streams.EndpointAPIKeyResolve, req, &v); err != nil {
		return events.APIKeyResolveReply{}, err
	}
	return v, nil
}
