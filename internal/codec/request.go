package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"

	"github.com/spendgate/spendgate/events"
)

// DecodeRequest strictly decodes a request body into v: at most
// MaxPayloadBytes, one JSON object, no unknown fields, no trailing data.
func DecodeRequest(data []byte, v any) error { return decodeRequest(data, v, true) }

// decodeRequest is DecodeRequest, with or without its fast path.
func decodeRequest(data []byte, v any, fast bool) error {
	if len(data) > events.MaxPayloadBytes {
		return events.Errorf(events.CodePayloadTooLarge, "request is %d bytes; the limit is %d", len(data), events.MaxPayloadBytes)
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return events.Errorf(events.CodeInvalidRequest, "request body must be a JSON object")
	}
	// The hot path's requests in their plain spelling are decoded without
	// reflection; anything else is left to the strict decoder below.
	switch t := v.(type) {
	case *events.AdmitRequest:
		if fast && fastAdmitRequest(data, t) {
			return nil
		}
	case *events.SettleRequest:
		if fast && fastSettleRequest(data, t) {
			return nil
		}
	case *events.ReleaseRequest:
		if fast && fastReleaseRequest(data, t) {
			return nil
		}
	}
	return decodeRequestSlow(data, v)
}

// decodeRequestSlow is DecodeRequest's strict decoder, by reflection.
func decodeRequestSlow(data []byte, v any) error {
	// checkKeys enforces exact, unique, known top-level field names (the
	// request types are flat: their only nested value is a string map), and
	// json.Unmarshal rejects malformed JSON, wrong types and trailing data.
	if err := checkKeys(data, v); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &events.Error{Code: events.CodeInvalidRequest, Message: decodeMessage(err, v), Err: err}
	}
	return nil
}

// fieldWants says, in the API's words, what each request field must be.
// A wrong JSON type for a field is refused with this text, never with
// encoding/json's, which names Go types and struct fields.
var fieldWants = map[string]string{
	"request_id":          `a string`,
	"reservation_id":      `a string (the reservation_id an admit returned)`,
	"scopes":              `an array of scope strings like ["org:acme"]`,
	"scope":               `a scope string like "org:acme"`,
	"kind":                `a scope kind string like "org"`,
	"amount":              `a decimal string like "0.05"`,
	"actual":              `a decimal string like "0.05"`,
	"limit":               `a decimal string like "0.05"`,
	"unit":                `a string like "USD"`,
	"period":              `one of the strings "month", "week", "day", "hour", "minute" or "lifetime"`,
	"mode":                `one of the strings "admit", "check" or "shadow"`,
	"tz":                  `an IANA time zone string like "Europe/Berlin"`,
	"disabled":            `true or false`,
	"brief":               `true or false`,
	"retry":               `true or false`,
	"allow_zero":          `true or false`,
	"fixed_slot":          `a decimal string like "1.00"`,
	"exposure_cap":        `a decimal string like "5.00"`,
	"learn":               `a percentile string like "p95"`,
	"learn_window":        `a whole number of calls like 100`,
	"learn_min_samples":   `a whole number of calls like 20`,
	"learn_floor":         `a decimal string like "0.001"`,
	"ttl":                 `a duration string like "30s"`,
	"metadata":            `an object of string values like {"model":"gpt-4o"}`,
	"model":               `a model name string like "gpt-4o"`,
	"input_tokens":        `a whole number of tokens like 1200`,
	"input_chars":         `a whole number of characters like 4800`,
	"max_output_tokens":   `a whole number of tokens like 800`,
	"output_tokens":       `a whole number of tokens like 640`,
	"cached_input_tokens": `a whole number of tokens like 1000`,
	"input":               `a decimal string price per million tokens like "2.50"`,
	"output":              `a decimal string price per million tokens like "10"`,
	"cached_input":        `a decimal string price per million tokens like "1.25"`,
	"by":                  `a string: "scope" or a metadata key like "model"`,
	"from":                `an RFC 3339 time string on a whole hour like "2026-12-01T00:00:00Z"`,
	"to":                  `an RFC 3339 time string on a whole hour like "2026-12-02T00:00:00Z"`,
	"shadow":              `true or false`,
	"tenant":              `a tenant name string like "acme"`,
	"max_open":            `a whole number of reservations like 10000 (0: no limit)`,
	"max_default_budgets": `a whole number of budgets like 10000 (0: no limit)`,
	"max_budgets":         `a whole number of budgets like 5000 (0: no limit)`,
	"rate":                `a whole number of requests per second like 500 (0: no limit)`,
	"burst":               `a whole number of requests like 256`,
	"denial_bytes":        `a whole number of bytes per second like 16384 (0: no limit)`,
	"count":               `a whole number of requests like 5`,
	"note":                `a one-word string like "estimate"`,
	"alerts":              `true or false`,
	"thresholds":          `an array of decimal strings like ["0.5","0.8"]`,
	"replace":             `true or false`,
	"cursor":              `a string (the next_cursor of the previous page)`,
	"sort":                `one of the strings "scope" or "utilization"`,
	"items":               `an array of request objects like [{"request_id":"r-1",...}]`,
	"id":                  `a key id string like "3f9a0c1d2e4b"`,
	"hash":                `a string (the secret's SHA-256, hex)`,
	"access":              `one of the strings "service", "admin" or ""`,
	"name":                `a string`,
	"end_user":            `a scope kind string like "user", or ""`,
	"run":                 `a scope kind string like "run", or ""`,
	"retired":             `true or false`,
	"reason":              `a string (a note, at most 200 bytes) like "run finished"`,
}

// fieldWantsOf overrides fieldWants for a field whose name means another
// thing in one request type, by "<type name>.<field>".
var fieldWantsOf = map[string]string{
	"BudgetListRequest.limit": `a whole number of budgets per page like 100 (absent or 0: 1000)`,
}

// wantOf says what the field name of request type t must be.
func wantOf(t reflect.Type, name string) (string, bool) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil {
		if w, ok := fieldWantsOf[t.Name()+"."+name]; ok {
			return w, true
		}
	}
	w, ok := fieldWants[name]
	return w, ok
}

// decodeMessage describes a decoding error of a request body in the API's
// words: the field by its JSON name and what it must be, or where the JSON
// is malformed.
func decodeMessage(err error, v any) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		field, _, nested := strings.Cut(te.Field, ".")
		want, ok := wantOf(reflect.TypeOf(v), field)
		if !ok {
			want = "of another type"
		}
		got := jsonKind(te.Value)
		// A wrong element inside an array or object field: Go reports the
		// element's type, not the field's.
		t := fieldType(reflect.TypeOf(v), field)
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem() // an optional field: what it points to
		}
		if nested || (t != nil && te.Type != nil && t.Kind() != te.Type.Kind()) {
			return fmt.Sprintf("%s must be %s; it holds %s", field, want, got)
		}
		return fmt.Sprintf("%s must be %s, got %s", field, want, got)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("request body is not valid JSON (at byte %d): %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "request body is not valid JSON: it ends too early"
	}
	return "request body is not a valid request object"
}

// jsonKind names a JSON value kind as encoding/json reports it ("number",
// "string", "bool", "array", "object", "number 1e999") with its article.
func jsonKind(value string) string {
	kind, _, _ := strings.Cut(value, " ")
	switch kind {
	case "number":
		if _, lit, ok := strings.Cut(value, " "); ok {
			return lit // the number as sent: 1e3, 2.5, -1
		}
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "array":
		return "an array"
	case "object":
		return "an object"
	case "":
		return "another type"
	}
	return kind
}

// fieldType returns the Go type of the struct field of t whose JSON name is
// name, or nil.
func fieldType(t reflect.Type, name string) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		n, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if n == "" {
			n = f.Name
		}
		if n == name {
			return f.Type
		}
	}
	return nil
}

// checkKeys rejects top-level keys that encoding/json would accept but a
// strict reader must not: a key that matches a field only case-insensitively
// ("AMOUNT") and a key given twice. It scans the bytes once without
// decoding values; malformed JSON is left for the decoder to report.
func checkKeys(data []byte, v any) error {
	allowed := fieldNames(reflect.TypeOf(v))
	var seen [16]string
	keys := seen[:0]
	depth, inStr, esc := 0, false, false
	expectKey := false
	keyStart := -1
	for i, c := range data {
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
				if keyStart >= 0 {
					key := string(data[keyStart:i])
					keyStart = -1
					for _, k := range keys {
						if k == key {
							return events.Errorf(events.CodeInvalidRequest, "request body: field %q appears twice", key)
						}
					}
					keys = append(keys, key)
					if allowed != nil && !allowed[key] {
						return events.Errorf(events.CodeInvalidRequest, "request body: unknown field %q", key)
					}
					if nullFollows(data[i+1:]) && wholeNumbers(reflect.TypeOf(v))[key] {
						return events.Errorf(events.CodeInvalidRequest,
							"%s must be %s, got null (JavaScript's JSON.stringify writes NaN and Infinity as null); leave the field out for 0",
							key, must(reflect.TypeOf(v), key))
					}
				}
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
			if depth == 1 && expectKey {
				keyStart = i + 1
				expectKey = false
			}
		case '{', '[':
			depth++
			if depth == 1 && c == '{' {
				expectKey = true
			}
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				expectKey = true
			}
		}
	}
	return nil
}

// must is wantOf's words, or a whole number's.
func must(t reflect.Type, name string) string {
	if w, ok := wantOf(t, name); ok {
		return w
	}
	return "a whole number"
}

// nullFollows reports whether the value after a key (rest starts right
// after the key's closing quote) is the literal null.
func nullFollows(rest []byte) bool {
	rest = bytes.TrimLeft(rest, " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(rest[1:], " \t\r\n"), []byte("null"))
}

var fieldCache sync.Map // reflect.Type -> *fieldInfo

// fieldInfo is what checkKeys needs of a struct type's fields: all their
// exact JSON names, and those of its integer fields that are not pointers
// (whole): encoding/json leaves such a field 0 for a null, and 0 is what
// leaving the field out means, so a null there (a NaN or Infinity that
// JSON.stringify wrote as null) would read as "none" (no output tokens to
// reserve or settle) instead of being refused.
type fieldInfo struct{ all, whole map[string]bool }

// fieldsOf returns t's fieldInfo, or nil for a type that is not a struct.
func fieldsOf(t reflect.Type) *fieldInfo {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	if fi, ok := fieldCache.Load(t); ok {
		return fi.(*fieldInfo)
	}
	fi := &fieldInfo{all: map[string]bool{}, whole: map[string]bool{}}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fi.all[name] = true
		switch f.Type.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			fi.whole[name] = true
		}
	}
	fieldCache.Store(t, fi)
	return fi
}

// fieldNames returns the exact JSON names of a struct type's fields, or nil
// for a type that is not a struct.
func fieldNames(t reflect.Type) map[string]bool {
	if fi := fieldsOf(t); fi != nil {
		return fi.all
	}
	return nil
}

// wholeNumbers returns the JSON names of a struct type's integer fields
// that are not pointers (see fieldInfo), or nil.
func wholeNumbers(t reflect.Type) map[string]bool {
	if fi := fieldsOf(t); fi != nil {
		return fi.whole
	}
	return nil
}
