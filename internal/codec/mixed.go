package codec

import "bytes"

// A mixed batch (the service's "batch" endpoint) carries requests of
// several kinds in one message: each item is an object of one key, the
// endpoint whose request it holds, {"admit":{...}}, {"settle":{...}} or
// {"release":{...}}.

// MixedItemOverhead is what AppendMixedItem adds to a request body at
// most (the longest endpoint name, "release").
const MixedItemOverhead = len(`{"release":}`)

// AppendMixedItem appends the mixed batch item of a request of endpoint:
// {"<endpoint>":body}. endpoint is a plain name (no character to escape).
func AppendMixedItem(dst []byte, endpoint string, body []byte) []byte {
	dst = append(dst, `{"`...)
	dst = append(dst, endpoint...)
	dst = append(dst, `":`...)
	dst = append(dst, body...)
	return append(dst, '}')
}

// SplitMixedItem splits a mixed batch item into its endpoint and its
// request body. ok is false unless item is an object of exactly one key,
// spelled without escapes, whose value is an object: the body's own
// content is left to the endpoint's strict decoder.
func SplitMixedItem(item []byte) (endpoint string, body []byte, ok bool) {
	t := bytes.TrimLeft(item, wsChars)
	if len(t) == 0 || t[0] != '{' {
		return "", nil, false
	}
	t = bytes.TrimLeft(t[1:], wsChars)
	if len(t) == 0 || t[0] != '"' {
		return "", nil, false
	}
	end := bytes.IndexByte(t[1:], '"')
	if end < 0 {
		return "", nil, false
	}
	key := t[1 : 1+end]
	if bytes.IndexByte(key, '\\') >= 0 {
		return "", nil, false
	}
	t = bytes.TrimLeft(t[2+end:], wsChars)
	if len(t) == 0 || t[0] != ':' {
		return "", nil, false
	}
	t = bytes.TrimLeft(t[1:], wsChars)
	n := objectLen(t)
	if n == 0 {
		return "", nil, false
	}
	body, rest := t[:n], bytes.Trim(t[n:], wsChars)
	if len(rest) != 1 || rest[0] != '}' {
		return "", nil, false
	}
	return string(key), body, true
}

// wsChars is JSON's whitespace.
const wsChars = " \t\r\n"

// objectLen returns the length of the JSON object that starts t (its
// braces balanced outside strings), or 0 if t does not start with one or
// it does not end.
func objectLen(t []byte) int {
	if len(t) == 0 || t[0] != '{' {
		return 0
	}
	depth, inStr := 0, false
	for i := 0; i < len(t); i++ {
		c := t[i]
		if inStr {
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				if c != '}' {
					return 0
				}
				return i + 1
			}
		}
	}
	return 0
}
