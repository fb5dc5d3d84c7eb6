package projector

import (
	"context"
	"errors"
	"runtime"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/spendgate/spendgate/streams"
)

// parseAhead is how many messages readParsed parses ahead of the fold.
const parseAhead = 256

// readParsed is read with every lane revision parsed ahead of fn, by one
// worker per CPU: decoding is most of a replay's work and needs nothing
// of the State, while fn still sees the messages one at a time, in
// stream order, on one goroutine.
func (p *Projector) readParsed(ctx context.Context, s jetstream.Stream, from, until uint64, fn func(message) error) error {
	type job struct {
		m    message
		done chan struct{}
	}
	work := make(chan *job, parseAhead)
	var wg sync.WaitGroup
	for i := 0; i < runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				rev, err := parseLane(j.m.data)
				j.m.parsed = &parsedLane{rev, err}
				close(j.done)
			}
		}()
	}
	defer func() { close(work); wg.Wait() }()
	var queue []*job // in stream order
	stopped := false
	call := func(m message) error {
		err := fn(m)
		if errors.Is(err, errStop) {
			stopped = true
		}
		return err
	}
	next := func() error {
		j := queue[0]
		queue[0] = nil
		queue = queue[1:]
		<-j.done
		return call(j.m)
	}
	err := p.read(ctx, s, from, until, func(m message) error {
		if !streams.IsLaneKey(m.key) {
			// Flush what is queued first: order matters.
			for len(queue) > 0 {
				if err := next(); err != nil {
					return err
				}
			}
			return call(m)
		}
		j := &job{m: m, done: make(chan struct{})}
		work <- j
		queue = append(queue, j)
		if len(queue) >= parseAhead {
			return next()
		}
		return nil
	})
	for err == nil && !stopped && len(queue) > 0 {
		err = next()
	}
	if errors.Is(err, errStop) {
		err = nil
	}
	if err != nil || stopped {
		// Let the workers finish what was handed to them.
		for _, j := range queue {
			<-j.done
		}
	}
	return err
}
