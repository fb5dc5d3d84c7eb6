package gate

// Head is the gate's state of one key.
type Head struct {
	// Valid is the sequence of the key's last revision that passed (0:
	// none), Hash the SHA-256 of its payload: what the key's next
	// revision names.
	Valid uint64
	Hash  string
	// Seen is the sequence of the last revision of the key skipped after
	// Valid (0: none): a writer's compare-and-set names it, so that its
	// write lands after it, while its chain names Valid.
	Seen uint64
	// Chained: the last revision that passed was chained, so an
	// unchained (version 1) revision of the key is a replay.
	Chained bool
}

// Rev is the last revision of the key seen, passed or skipped: what a
// compare-and-set on the key names.
func (h Head) Rev() uint64 { return max(h.Valid, h.Seen) }

// Heads is the gate's state of every key of one fold. Not safe for
// concurrent use: its owner guards it (a replica, with its book's lock).
type Heads struct {
	m map[string]*Head
	// after: see NewHeadsAfter.
	after uint64
	// skippedOnly are the keys whose head was made by a skipped revision
	// (no revision of theirs had passed), oldest first: at most
	// MaxSkippedOnly are kept (see forgetSkippedOnly).
	skippedOnly []string
}

// MaxSkippedOnly bounds the heads of keys no revision of which has passed
// the gate, only skipped ones: garbage under a key no one defined
// ("budget.<anything>", "pricing.<anything>", ...) made by a login that
// may write the stream. Without a bound each such key held a head in every
// replica's memory and snapshot, as many as the garbage names. A head
// forgotten costs its key's next writer one lost compare-and-set and a
// catch-up, which folds the skipped revision again and records it.
const MaxSkippedOnly = 4096

// NewHeads returns empty Heads: a fold from the stream's first message.
func NewHeads() *Heads {
	return &Heads{m: map[string]*Head{}}
}

// NewHeadsAfter returns Heads for a fold that starts after seq without
// knowing the heads there (a reader resuming from a state of its own that
// does not record them): the first revision of each key is taken as it
// is if it names a revision at or before seq; every later one is checked.
// A fold that can, starts from a snapshot's heads instead.
func NewHeadsAfter(seq uint64) *Heads {
	h := NewHeads()
	h.after = seq
	return h
}

// Get returns the head of key (the zero Head if none).
func (h *Heads) Get(key string) Head { return h.get(key) }

func (h *Heads) get(key string) Head {
	if hd := h.m[key]; hd != nil {
		return *hd
	}
	return Head{}
}

// Rev is Get(key).Rev().
func (h *Heads) Rev(key string) uint64 {
	if hd := h.m[key]; hd != nil {
		return max(hd.Valid, hd.Seen)
	}
	return 0
}

// Valid returns the last revision of key that passed and its payload
// hash.
func (h *Heads) Valid(key string) (uint64, string) {
	if hd := h.m[key]; hd != nil {
		return hd.Valid, hd.Hash
	}
	return 0, ""
}

// Set sets the head of key as a snapshot recorded it.
func (h *Heads) Set(key string, hd Head) {
	c := hd
	_, had := h.m[key]
	h.m[key] = &c
	if !had && c.Valid == 0 {
		h.addSkippedOnly(key)
	}
}

// addSkippedOnly notes that key's new head holds only a skipped revision,
// and forgets the oldest such head past MaxSkippedOnly whose key has still
// had no revision pass.
func (h *Heads) addSkippedOnly(key string) {
	h.skippedOnly = append(h.skippedOnly, key)
	for len(h.skippedOnly) > MaxSkippedOnly {
		old := h.skippedOnly[0]
		h.skippedOnly[0] = ""
		h.skippedOnly = h.skippedOnly[1:]
		if hd := h.m[old]; hd != nil && hd.Valid == 0 {
			delete(h.m, old)
		}
	}
	if cap(h.skippedOnly) > 4*MaxSkippedOnly {
		h.skippedOnly = append([]string(nil), h.skippedOnly...) // let the front go
	}
}

// Len returns the number of keys with a head.
func (h *Heads) Len() int { return len(h.m) }

// Each calls f with every key and its head, in no order.
func (h *Heads) Each(f func(key string, hd Head)) {
	for k, hd := range h.m {
		f(k, *hd)
	}
}

// pass records that rev passed: it is its key's head now.
func (h *Heads) pass(rev *Revision) {
	_, chained := rev.Chain()
	hd := h.m[rev.Key]
	if hd == nil {
		hd = &Head{}
		h.m[rev.Key] = hd
	}
	hd.Valid, hd.Hash, hd.Seen, hd.Chained = rev.Seq, rev.Hash, 0, chained
}

// see records that the revision of key at seq was skipped.
func (h *Heads) see(key string, seq uint64) {
	hd := h.m[key]
	if hd == nil {
		hd = &Head{}
		h.m[key] = hd
		h.addSkippedOnly(key)
	}
	if seq > max(hd.Valid, hd.Seen) {
		hd.Seen = seq
	}
}

// Own records a revision this replica wrote itself and folds from memory:
// it is its key's head now, as if it had passed the gate. hash is its
// payload's; chained whether it names a chain.
func (h *Heads) Own(key string, seq uint64, hash string) {
	hd := h.m[key]
	if hd == nil {
		hd = &Head{}
		h.m[key] = hd
	}
	if seq <= max(hd.Valid, hd.Seen) {
		return
	}
	hd.Valid, hd.Hash, hd.Seen, hd.Chained = seq, hash, 0, true
}
