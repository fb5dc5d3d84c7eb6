package ledger

import (
	"container/heap"
	"time"
)

// dueIndex is a min-heap of the book's open reservations by ExpiresAt, so
// that listing what is due costs what is due, not what is open: a
// reservation enters when it opens and leaves when it closes (each
// Reservation records its own position, see Reservation.due).
type dueIndex []*Reservation

func (d dueIndex) Len() int { return len(d) }
func (d dueIndex) Less(i, j int) bool {
	if !d[i].ExpiresAt.Equal(d[j].ExpiresAt) {
		return d[i].ExpiresAt.Before(d[j].ExpiresAt)
	}
	return d[i].ID < d[j].ID
}
func (d dueIndex) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].due, d[j].due = i+1, j+1
}
func (d *dueIndex) Push(x any) {
	r := x.(*Reservation)
	r.due = len(*d) + 1
	*d = append(*d, r)
}
func (d *dueIndex) Pop() any {
	old := *d
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*d = old[:len(old)-1]
	r.due = 0
	return r
}

// add indexes r (an open reservation of the book) unless it is indexed.
func (d *dueIndex) add(r *Reservation) {
	if r.due == 0 {
		heap.Push(d, r)
	}
}

// remove drops r from the index if it is there.
func (d *dueIndex) remove(r *Reservation) {
	if r.due != 0 && r.due <= len(*d) && (*d)[r.due-1] == r {
		heap.Remove(d, r.due-1)
	}
}

// by returns the indexed reservations whose ExpiresAt is at or before now,
// visiting only those and their direct children in the heap.
func (d dueIndex) by(now time.Time) []*Reservation {
	var out []*Reservation
	stack := []int{0}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if i >= len(d) || d[i].ExpiresAt.After(now) {
			continue
		}
		out = append(out, d[i])
		stack = append(stack, 2*i+1, 2*i+2)
	}
	return out
}
