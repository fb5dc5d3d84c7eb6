package codec

import (
	"bytes"
	"encoding/json"

	"github.com/spendgate/spendgate/events"
)

// DecodeBatch strictly decodes a batch request body: at most
// MaxBatchPayloadBytes, one JSON object whose only field is "items", an
// array of 1 to MaxBatchItems JSON values. Items are returned raw, to be
// decoded one by one with DecodeRequest (so an item that is not a valid
// request is refused on its own).
//
// Errors (*Error): CodePayloadTooLarge; CodeInvalidRequest (not an object,
// unknown or repeated field, malformed JSON, items not an array, empty or
// longer than MaxBatchItems).
func DecodeBatch(data []byte) ([]json.RawMessage, error) { return decodeBatch(data, true) }

// SplitBatch is DecodeBatch without checking, on its fast path, that each
// item is valid JSON: the envelope is checked as strictly, and the items
// are those DecodeBatch would return whenever it returns any. Only items
// that are not valid JSON make the two differ: DecodeBatch refuses such a
// batch whole, SplitBatch may return it. A caller that decodes every item
// strictly (DecodeRequest refuses exactly what encoding/json refuses) gets
// the validity check for free: it needs DecodeBatch's verdict only when an
// item fails to decode, and must ask for it before acting on any item.
func SplitBatch(data []byte) ([]json.RawMessage, error) { return decodeBatch(data, false) }

func decodeBatch(data []byte, validate bool) ([]json.RawMessage, error) {
	if len(data) > events.MaxBatchPayloadBytes {
		return nil, events.Errorf(events.CodePayloadTooLarge, "batch request is %d bytes; the limit is %d", len(data), events.MaxBatchPayloadBytes)
	}
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, events.Errorf(events.CodeInvalidRequest, "batch request body must be a JSON object {\"items\":[...]}")
	}
	// The plain spelling (as EncodeBatchReply writes it, with "items"
	// for the key: an array of objects) is split without reflection.
	if items, ok := splitBatchReply(data, validate); ok && len(items) > 0 && len(items) <= events.MaxBatchItems {
		return items, nil
	}
	var req events.BatchRequest
	if err := checkKeys(data, &req); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, &events.Error{Code: events.CodeInvalidRequest, Message: "batch request body must be {\"items\":[request objects]}", Err: err}
	}
	switch {
	case len(req.Items) == 0:
		return nil, events.Errorf(events.CodeInvalidRequest, "batch request needs at least one item in \"items\"")
	case len(req.Items) > events.MaxBatchItems:
		return nil, events.Errorf(events.CodeInvalidRequest, "batch request has %d items; the limit is %d", len(req.Items), events.MaxBatchItems)
	}
	return req.Items, nil
}

// EncodeBatchReply writes {"items":[...]} around already encoded item
// replies.
func EncodeBatchReply(items [][]byte) []byte {
	n := len(`{"items":[]}`)
	for _, it := range items {
		n += len(it) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, `{"items":[`...)
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	return append(out, "]}"...)
}
