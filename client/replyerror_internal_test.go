package client

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/events"
)

// TestReplyError_FirstKey: a body is an error reply when it is an object
// whose key is "error", whatever the whitespace around its brace; a reply
// that holds "error" elsewhere (in a message, a metadata value) is not.
// Fails if replyError stops decoding an indented error reply, or decodes a
// reply as an error for the word inside it.
func TestReplyError_FirstKey(t *testing.T) {
	for _, body := range []string{
		`{"error":{"code":"limit_reached","message":"m"}}`,
		" \n{\n  \"error\": {\"code\": \"limit_reached\", \"message\": \"m\"}\n}\n",
	} {
		e, _ := replyError(&nats.Msg{Data: []byte(body)})
		require.NotNil(t, e, body)
		require.Equal(t, events.Code("limit_reached"), e.Code)
	}
	for _, body := range []string{
		`{"admitted":true,"request_id":"error","reservation_id":"rsv_1"}`,
		`{"items":[{"error":{"code":"invalid_amount","message":"m"}}]}`,
		`{"error":null}`,
		``,
		`[]`,
	} {
		e, _ := replyError(&nats.Msg{Data: []byte(body)})
		require.Nil(t, e, body)
	}
}
