package events

import (
	"context"
	"strings"
)

// HeldRequestPrefix starts the request ids of held reservations: those a
// gateway (spendgate gateway) opens for the calls it makes. Only the held
// endpoints (streams.Layout.HeldEndpoint: "<prefix>held.<endpoint>", and
// "<prefix>held.t.<tenant>.<endpoint>" for a tenant) may settle, release or
// void a held reservation, or admit with such a request id; the plain and
// tenant endpoints answer CodeReservationHeld. Whoever holds a key of the
// gateway may call the plain endpoints (the HTTP API, a tenant's NATS
// login): without this, a caller could release the gateway's reservation
// while its provider call runs, and the gateway's settle of that call
// would find it released and record nothing.
const HeldRequestPrefix = "gw-"

// IsHeldRequestID reports whether request id id (a stored one, tenant
// qualified, or a caller's) names a held reservation.
func IsHeldRequestID(id string) bool {
	return strings.HasPrefix(LocalRequestID(id), HeldRequestPrefix)
}

type heldKey struct{}

// ContextWithHeld returns ctx marked as a request of a held endpoint: it
// may close held reservations (HeldRequestPrefix).
func ContextWithHeld(ctx context.Context) context.Context {
	return context.WithValue(ctx, heldKey{}, true)
}

// HeldFromContext reports whether ctx is a held endpoint's request
// (ContextWithHeld).
func HeldFromContext(ctx context.Context) bool {
	h, _ := ctx.Value(heldKey{}).(bool)
	return h
}

// CheckHeld returns CodeReservationHeld if request id id names a held
// reservation and ctx is not a held endpoint's request; what is the
// request ("settle", "release", "void", "admit").
func CheckHeld(ctx context.Context, what, id string) error {
	if !IsHeldRequestID(id) || HeldFromContext(ctx) {
		return nil
	}
	return Errorf(CodeReservationHeld, "request id %s is held by a gateway (its ids start %q): only the gateway may %s it", LocalRequestID(id), HeldRequestPrefix, what)
}
