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
		got := estimateInput([]byte(c.body))
		if c.image {
			require.Less(t, got, int64(ImageTokens+200), c.name)
			require.Greater(t, got, int64(ImageTokens), c.name)
		} else {
			require.EqualValues(t, len(c.body), got, c.name)
		}
	}
}
