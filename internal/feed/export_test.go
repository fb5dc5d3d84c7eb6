package feed

import "context"

// Tail exposes where the relay finds the feed standing, to the tests.
func (r *Relay) Tail(ctx context.Context) (feedSeq uint64, last Position, err error) {
	s, err := r.js.Stream(ctx, r.l.FeedStreamName())
	if err != nil {
		return 0, Position{}, err
	}
	t, err := r.readTail(ctx, s)
	return t.feedSeq, t.last, err
}
