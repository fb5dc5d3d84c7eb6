// Package codec holds spendgate's hand-written JSON codecs of the hot path,
// written without reflection for speed: the admit, settle and release
// requests and replies and batch bodies (client and service), the strict
// request decoder (DecodeRequest), and the events and lane revisions the
// ledger writes and every reader of the stream reads (AppendLane,
// DecodeLane).
//
// They are never a second definition of a format: package events defines
// every body for plain encoding/json. Each encoder here writes exactly the
// bytes encoding/json writes for the same value; each fast decoder builds
// exactly what the encoding/json decoder behind it builds (strict where
// the wire is strict) or declines and leaves the input to it. Fuzz and
// golden tests hold them to that.
package codec
