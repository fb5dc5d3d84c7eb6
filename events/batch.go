package events

import (
	"encoding/json"
)

// Batch bounds: a batch request carries at most MaxBatchItems items in at
// most MaxBatchPayloadBytes; each item is also bounded by MaxPayloadBytes,
// as a single request is.
const (
	MaxBatchItems        = 256
	MaxBatchPayloadBytes = 512 << 10
)

// BatchRequest is the body of a batch endpoint (admit.batch, settle.batch,
// release.batch): Items holds request objects of the endpoint's kind, each
// exactly what the single endpoint takes. Every item is validated, decided
// and answered on its own; one refused or denied item never fails another.
type BatchRequest struct {
	Items []json.RawMessage `json:"items"`
}

// BatchReply answers a batch request: Items[i] answers the request's
// Items[i], with exactly the body the single endpoint would have replied
// (its reply object, or {"error":{...}} for a refused item).
type BatchReply struct {
	Items []json.RawMessage `json:"items"`
}
