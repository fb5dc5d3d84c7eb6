package metrics

import (
	"fmt"
	"strconv"
	"sync"
)

// vec holds the labelled members of a family. Looking up an existing
// member takes a read lock (readers do not wait for each other) and does
// not allocate for keys up to 128 bytes; only the first use of a label
// combination takes the write lock.
type vec[T any] struct {
	d        *desc
	newChild func() *T
	mu       sync.RWMutex
	children map[string]*child[T] // appendKey(label values) -> member
}

type child[T any] struct {
	values []string
	m      *T
}

func (v *vec[T]) init(d *desc, newChild func() *T) {
	v.d = d
	v.newChild = newChild
	v.children = map[string]*child[T]{}
}

func (v *vec[T]) desc() *desc { return v.d }

func (v *vec[T]) with(values []string) *T {
	if len(values) != len(v.d.labels) {
		panic(fmt.Sprintf("metrics: %s has labels %v; got %d values", v.d.name, v.d.labels, len(values)))
	}
	var arr [128]byte
	key := appendKey(arr[:0], values)
	v.mu.RLock()
	c, ok := v.children[string(key)] // no allocation: the compiler looks up without converting
	v.mu.RUnlock()
	if ok {
		return c.m
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.children[string(key)]; ok {
		return c.m
	}
	c = &child[T]{values: append([]string(nil), values...), m: v.newChild()}
	v.children[string(key)] = c
	return c.m
}

func (v *vec[T]) each(dst []series, f func([]string, *T) series) []series {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, c := range v.children {
		dst = append(dst, f(c.values, c.m))
	}
	return dst
}

// appendKey length-prefixes each value, so that no two different lists of
// values share a key whatever bytes they hold.
func appendKey(b []byte, values []string) []byte {
	for _, v := range values {
		b = strconv.AppendInt(b, int64(len(v)), 10)
		b = append(b, ':')
		b = append(b, v...)
	}
	return b
}
