package feed

import "context"

// Tail and Append expose the relay's compare-and-set append to the tests.
func (r *Relay) Tail(ctx context.Context) (feedSeq uint64, last Position, err error) {
	t, err := r.readTail(ctx)
	return t.feedSeq, t.last, err
}

func (r *Relay) Append(ctx context.Context, feedSeq uint64, last Position, m Message) (uint64, Position, error) {
	t, err := r.append(ctx, tail{feedSeq: feedSeq, last: last}, m)
	return t.feedSeq, t.last, err
}
