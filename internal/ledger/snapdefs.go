package ledger

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/spendgate/spendgate/internal/gate"
)

// The definition keys whose state is their last revision (pricing,
// defaults, API keys, tenant limits) travel in a snapshot the same way:
// each as the revision it was folded from, at that revision, with its
// key's hash. snapDefs and loadDefs are that way, once.

// snapDefs lists defs, one family of definitions (what names it in an
// error), as a snapshot carries them, sorted by key; at returns a
// definition's revision and the revision value it was folded from.
func snapDefs[T any](b *book, what string, defs map[string]T, at func(T) (rev uint64, src any)) ([]snapBudget, error) {
	var out []snapBudget
	for key, d := range defs {
		rev, src := at(d)
		raw, err := json.Marshal(src)
		if err != nil {
			return nil, fmt.Errorf("ledger: snapshot of %s %s: %w", what, key, err)
		}
		_, hash := b.valid(key)
		out = append(out, snapBudget{snapKey: snapKey{key, rev, hash}, Revision: raw})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// loadDefs sets the definitions of one family of a snapshot at seq into
// b: each decoded, checked to belong under its key (keyOf) at a revision
// the snapshot covers, set, and its key's head set.
func loadDefs[R any](b *book, what string, defs []snapBudget, seq uint64, decode func([]byte) (R, error), keyOf func(*R) string, set func(key string, rev uint64, r *R)) error {
	for _, sd := range defs {
		r, err := decode(sd.Revision)
		if err != nil {
			return fmt.Errorf("%s %s: %v", what, sd.Key, err)
		}
		if k := keyOf(&r); k != sd.Key || sd.Rev == 0 || sd.Rev > seq {
			return fmt.Errorf("%s %s: revision of %s at %d", what, sd.Key, k, sd.Rev)
		}
		set(sd.Key, sd.Rev, &r)
		b.heads.Set(sd.Key, gate.Head{Valid: sd.Rev, Hash: sd.Hash, Chained: true})
	}
	return nil
}
