package bench

import (
	"encoding/json"
	"errors"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/spendgate/spendgate/events"
	"github.com/spendgate/spendgate/internal/codec"
	"github.com/spendgate/spendgate/internal/service"
	"github.com/spendgate/spendgate/streams"
)

// The floor: a micro service that answers as spendgate's endpoints do
// without the ledger, what NATS request-reply alone costs.

// floorService is the request-reply floor: a micro service whose endpoints
// decode the request as spendgate does and reply at once.
type floorService struct {
	svc      micro.Service
	inflight chan struct{}
	wg       sync.WaitGroup
}

// startFloor registers "spendgate-floor" on nc. It dispatches exactly as
// the spendgate service does: the micro handler copies the request's data
// and reply subject and hands them to a goroutine of its own (bounded by
// service.MaxInFlight), which decodes the body with codec.DecodeRequest
// into the same request struct, marshals a small reply and publishes it on
// nc.
func startFloor(nc *nats.Conn) (*floorService, error) {
	f := &floorService{inflight: make(chan struct{}, service.MaxInFlight)}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        "spendgate-floor",
		Version:     service.Version,
		Description: "spendgate bench: decodes the request and replies; what request-reply itself costs",
		QueueGroup:  "spendgate-floor",
	})
	if err != nil {
		return nil, err
	}
	f.svc = svc
	dispatch := func(h func([]byte) (any, error)) micro.Handler {
		return micro.HandlerFunc(func(r micro.Request) {
			data, reply := r.Data(), r.Reply()
			f.inflight <- struct{}{}
			f.wg.Add(1)
			go func() {
				defer func() { <-f.inflight; f.wg.Done() }()
				msg := &nats.Msg{Subject: reply}
				out, err := h(data)
				if err == nil {
					msg.Data, err = json.Marshal(out)
				}
				if err != nil {
					msg.Data, _ = json.Marshal(events.ErrorReply{Error: &events.Error{Code: events.CodeInvalidRequest, Message: err.Error()}})
					msg.Header = nats.Header{micro.ErrorHeader: []string{string(events.CodeInvalidRequest)}, micro.ErrorCodeHeader: []string{"400"}}
				}
				if reply != "" {
					_ = nc.PublishMsg(msg)
				}
			}()
		})
	}
	admit := func(data []byte) (any, error) {
		var req events.AdmitRequest
		if err := codec.DecodeRequest(data, &req); err != nil {
			return nil, err
		}
		return events.AdmitReply{Admitted: true, RequestID: req.RequestID, ReservationID: "rsv_floor_" + req.RequestID}, nil
	}
	settle := func(data []byte) (any, error) {
		var req events.SettleRequest
		if err := codec.DecodeRequest(data, &req); err != nil {
			return nil, err
		}
		return events.CloseReply{ReservationID: req.ReservationID, Status: events.StatusSettled, Reserved: req.Actual, Actual: req.Actual}, nil
	}
	if err := svc.AddEndpoint("admit", dispatch(admit), micro.WithEndpointSubject(benchFloorAdmit)); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	if err := svc.AddEndpoint("settle", dispatch(settle), micro.WithEndpointSubject(benchFloorSettle)); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	// The batch endpoints, for the Go client pointed at the floor: each
	// item decoded and answered as the single endpoint answers it.
	batch := func(h func([]byte) (any, error)) func([]byte) (any, error) {
		return func(data []byte) (any, error) {
			items, err := codec.DecodeBatch(data)
			if err != nil {
				return nil, err
			}
			out := make([]json.RawMessage, len(items))
			for i, item := range items {
				v, err := h(item)
				if err != nil {
					v = events.ErrorReply{Error: &events.Error{Code: events.CodeInvalidRequest, Message: err.Error()}}
				}
				if out[i], err = json.Marshal(v); err != nil {
					return nil, err
				}
			}
			return events.BatchReply{Items: out}, nil
		}
	}
	// The mixed batch's items, {"admit":{...}} or {"settle":{...}}, are
	// unwrapped and answered as their kind's.
	mixed := func(item []byte) (any, error) {
		switch kind, body, _ := codec.SplitMixedItem(item); kind {
		case streams.EndpointAdmit:
			return admit(body)
		case streams.EndpointSettle:
			return settle(body)
		}
		return nil, errors.New("not a mixed batch item of admit or settle")
	}
	for name, ep := range map[string]struct {
		subject string
		h       func([]byte) (any, error)
	}{
		"admit_batch":  {benchFloorPrefix + streams.EndpointAdmitBatch, batch(admit)},
		"settle_batch": {benchFloorPrefix + streams.EndpointSettleBatch, batch(settle)},
		"batch":        {benchFloorPrefix + streams.EndpointBatch, batch(mixed)},
	} {
		if err := svc.AddEndpoint(name, dispatch(ep.h), micro.WithEndpointSubject(ep.subject)); err != nil {
			_ = svc.Stop()
			return nil, err
		}
	}
	if err := nc.FlushTimeout(benchRequestTimeout); err != nil {
		_ = svc.Stop()
		return nil, err
	}
	return f, nil
}

// Stop stops the endpoints and waits for the requests in flight.
func (f *floorService) Stop() {
	_ = f.svc.Stop()
	f.wg.Wait()
}
