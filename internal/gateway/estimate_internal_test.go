package gateway

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEstimateInput_OnlyInlineImagesDiscounted: an image part's base64
// data URL counts ImageTokens, in either OpenAI form and with "/" escaped;
// text that starts "data:image/" (a message's content, or a data URL with
// anything but base64 in it) counts its bytes. It fails on the earlier
// estimate, which discounted every string starting "data:image/": the
// 300 KB prompt below then reserved 3,000 tokens.
func TestEstimateInput_OnlyInlineImagesDiscounted(t *testing.T) {
	b64 := strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA/+==", 4000) // 112,000 bytes
	lorem := strings.Repeat("lorem ipsum dolor sit amet ", 11000)
	for _, c := range []struct {
		name  string
		body  string
		image bool
	}{
		{"image_url object", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64 + `"}}]}]}`, true},
		{"responses input_image", `{"input":[{"role":"user","content":[{"type":"input_image","image_url" : "data:image/jpeg;base64,` + b64 + `"}]}]}`, true},
		{"escaped slashes", `{"messages":[{"content":[{"image_url":{"url":"data:image/png;base64,` + strings.ReplaceAll(b64, "/", `\/`) + `"}}]}]}`, true},
		{"text content", `{"messages":[{"role":"user","content":"data:image/png;base64 ` + lorem + `"}]}`, false},
		{"text part", `{"messages":[{"role":"user","content":[{"type":"text","text":"data:image/png;base64,` + b64 + `"}]}]}`, false},
		{"url that is not base64", `{"messages":[{"content":[{"image_url":{"url":"data:image/png;base64,` + lorem + `"}}]}]}`, false},
		{"no base64 marker", `{"messages":[{"content":[{"image_url":{"url":"data:image/png,` + b64 + `"}}]}]}`, false},
	} {
		got := estimateInput([]byte(c.body), ImageTokens)
		if c.image {
			require.Less(t, got, int64(ImageTokens+200), c.name)
			require.Greater(t, got, int64(ImageTokens), c.name)
		} else {
			require.EqualValues(t, len(c.body), got, c.name)
		}
	}
}

// TestEstimateInput_ReferencesCountImageTokens: an image by URL (OpenAI's
// image parts, the Responses API's input_image, Anthropic's URL source) or
// a file by id counts the configured image tokens, not the few bytes of
// its reference; a URL under a key that names no image, and a URL in text,
// count their bytes. How it can fail: the earlier estimate counted the
// reference's bytes, about 40 tokens for an image gpt-4o-mini bills at up
// to 25,501, so concurrent calls passed the limit far beyond one call's
// overrun.
func TestEstimateInput_ReferencesCountImageTokens(t *testing.T) {
	const image = 25501
	for _, c := range []struct {
		name   string
		body   string
		images int
	}{
		{"chat image_url", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/cat.png","detail":"high"}}]}]}`, 1},
		{"responses input_image", `{"input":[{"role":"user","content":[{"type":"input_image","image_url": "https://example.com/a.png"},{"type":"input_file","file_id":"file-abc"}]}]}`, 2},
		{"anthropic url source", `{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"http://example.com/a.jpg"}},{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}]}]}`, 2},
		{"url in text", `{"messages":[{"role":"user","content":"see https://example.com/cat.png"}]}`, 0},
		{"url of a tool", `{"tools":[{"type":"mcp","server_url":"https://example.com/mcp"}],"messages":[]}`, 0},
	} {
		got := estimateInput([]byte(c.body), image)
		if c.images == 0 {
			require.EqualValues(t, len(c.body), got, c.name)
			continue
		}
		require.GreaterOrEqual(t, got, int64(c.images*image), c.name)
		require.Less(t, got, int64(c.images*image+len(c.body)), c.name)
	}
}

// TestOtherModel: the priced model, a dated version of it and an answer
// naming none are the same model; anything else is another.
func TestOtherModel(t *testing.T) {
	for _, c := range []struct {
		priced, served string
		other          bool
	}{
		{"gpt-4o", "", false},
		{"gpt-4o", "gpt-4o", false},
		{"gpt-4o", "gpt-4o-2024-08-06", false},
		{"gpt-4", "gpt-4-0613", false},
		{"claude-3-5-sonnet-latest", "claude-3-5-sonnet-20241022", false},
		{"openai/gpt-4o", "openai/gpt-4o", false},
		{"gpt-4o", "gpt-4o-mini", true},
		{"gpt-4o", "gpt-4o-mini-2024-07-18", true},
		{"gpt-4o-mini", "gpt-4o", true},
		{"gpt-4o", "gpt-4o-", true},
		{"gpt-4o", "GPT-4O", true},
		{"claude-3-5-sonnet-latest", "claude-3-opus-20240229", true},
	} {
		if got := otherModel(c.priced, c.served); got != c.other {
			t.Errorf("otherModel(%q, %q) = %v, want %v", c.priced, c.served, got, c.other)
		}
	}
}
