package codec

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplitMixedItem(t *testing.T) {
	for _, c := range []struct {
		item, endpoint, body string
		ok                   bool
	}{
		{`{"admit":{"request_id":"r1"}}`, "admit", `{"request_id":"r1"}`, true},
		{` { "settle" : {"actual":"1","x":{"y":"}"}} } `, "settle", `{"actual":"1","x":{"y":"}"}}`, true},
		{`{"release":{"s":"a\"}b"}}`, "release", `{"s":"a\"}b"}`, true},
		{`{"admit":{}}`, "admit", `{}`, true},
		// Two keys: the second kind must not ride along unseen.
		{`{"admit":{"a":1},"settle":{}}`, "", "", false},
		{`{"admit":1}`, "", "", false},
		{`{"admit":[1]}`, "", "", false},
		{`{"admit":"x"}`, "", "", false},
		{`{"adm\u0069t":{}}`, "", "", false},
		{`{"admit":{}`, "", "", false},
		{`{"admit":{"a":"}`, "", "", false},
		{`{}`, "", "", false},
		{`[]`, "", "", false},
		{``, "", "", false},
		{`{"admit":{]}`, "", "", false},
	} {
		endpoint, body, ok := SplitMixedItem([]byte(c.item))
		require.Equal(t, c.ok, ok, c.item)
		require.Equal(t, c.endpoint, endpoint, c.item)
		require.Equal(t, c.body, string(body), c.item)
	}
}

func FuzzMixedItem(f *testing.F) {
	f.Add("admit", []byte(`{"request_id":"r1","amount":"0.1"}`))
	f.Add("settle", []byte(`{"s":"}\"{"}`))
	f.Fuzz(func(t *testing.T, endpoint string, body []byte) {
		for _, e := range []string{"admit", "settle", "release"} {
			if endpoint != e {
				continue
			}
			n := objectLen(body)
			item := AppendMixedItem(nil, endpoint, body)
			got, b, ok := SplitMixedItem(item)
			if n == 0 || n != len(body) {
				// Not one whole object: never split as one.
				require.False(t, ok && string(b) == string(body), "%q", item)
				continue
			}
			require.True(t, ok, "%q", item)
			require.Equal(t, endpoint, got)
			require.Equal(t, string(body), string(b))
		}
		// Whatever the bytes, splitting never panics.
		SplitMixedItem(body)
	})
}
