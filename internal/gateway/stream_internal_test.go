package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStream_AnthropicDeltaKeepsCacheCounts: a message_delta that repeats
// the input without the cache counts (they are nullable in Anthropic's
// MessageDeltaUsage) keeps message_start's cache counts; one that gives a
// count takes it. How it can fail: the earlier fold rebuilt the input from
// the delta alone and recorded 10 input tokens of 7,010, none cached.
func TestStream_AnthropicDeltaKeepsCacheCounts(t *testing.T) {
	var messages *api
	for _, a := range apis {
		if a.kind == KindAnthropic {
			messages = a
		}
	}
	require.NotNil(t, messages)
	start := `{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":2000,"cache_read_input_tokens":5000,"output_tokens":1}}}`
	for _, c := range []struct {
		delta                 string
		input, cached, output int64
	}{
		{`{"type":"message_delta","usage":{"input_tokens":10,"output_tokens":7}}`, 7010, 5000, 7},
		{`{"type":"message_delta","usage":{"input_tokens":10,"cache_read_input_tokens":null,"output_tokens":7}}`, 7010, 5000, 7},
		{`{"type":"message_delta","usage":{"output_tokens":7}}`, 7010, 5000, 7},
		{`{"type":"message_delta","usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":6000,"output_tokens":9}}`, 6012, 6000, 9},
	} {
		s := &streamState{a: messages}
		s.observeAnthropic([]byte("message_start"), []byte(start))
		s.observeAnthropic([]byte("message_delta"), []byte(c.delta))
		require.True(t, s.final, c.delta)
		require.Equal(t, usage{input: c.input, cached: c.cached, output: c.output}, s.u, c.delta)
	}
}
