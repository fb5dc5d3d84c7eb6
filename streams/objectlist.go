package streams

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ObjectEntry is what ListObjects keeps of an object's meta.
type ObjectEntry struct {
	// Name is the object's name, as its meta's subject encodes it (what
	// ObjectStore.Get looks it up by).
	Name string
	// Size, Chunks and NUID are as its meta says: nothing checks them
	// against the chunks in the bucket.
	Size   uint64
	Chunks uint32
	NUID   string
	// ModTime is when its meta was written.
	ModTime time.Time
}

// ListObjects returns the objects of object store bucket whose name keep
// accepts (nil: all), deleted ones left out, in the order of their metas
// in the bucket's stream (ErrBucketNotFound: no such bucket).
//
// Why not ObjectStore.List: it decodes every meta whole into memory before
// its caller sees a name, and a meta, which anyone who may write the bucket
// can publish, is up to the server's max payload (1 MiB) of headers and
// metadata, decoded into maps of several times its size: 15 MB of such
// metas under snapshot names took 105 MB of a replica's heap at start, so
// a GB of them would take its whole memory. ListObjects reads a meta's name
// from its subject, decodes no meta keep refuses, and of the others only
// the few fields above.
func ListObjects(ctx context.Context, js jetstream.JetStream, bucket string, keep func(name string) bool) ([]ObjectEntry, error) {
	prefix := "$O." + bucket + ".M."
	cons, err := js.OrderedConsumer(ctx, "OBJ_"+bucket, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{prefix + ">"},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, jetstream.ErrBucketNotFound
		}
		return nil, fmt.Errorf("streams: listing %s: %w", bucket, err)
	}
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		return nil, nil
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("streams: listing %s: %w", bucket, err)
	}
	defer it.Stop()
	var out []ObjectEntry
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("streams: listing %s: %w", bucket, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("streams: listing %s: %w", bucket, err)
		}
		if e, ok := objectEntry(m.Subject(), prefix, m.Data(), keep); ok {
			e.ModTime = md.Timestamp
			out = append(out, e)
		}
		if md.NumPending == 0 {
			return out, nil
		}
	}
}

// objectEntry decodes the meta data published on subject, if it names an
// object keep accepts and is not a deletion.
func objectEntry(subject, prefix string, data []byte, keep func(string) bool) (ObjectEntry, bool) {
	enc, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return ObjectEntry{}, false
	}
	name, err := base64.URLEncoding.DecodeString(enc)
	if err != nil || keep != nil && !keep(string(name)) {
		return ObjectEntry{}, false
	}
	var meta struct {
		Size    uint64 `json:"size"`
		Chunks  uint32 `json:"chunks"`
		NUID    string `json:"nuid"`
		Deleted bool   `json:"deleted"`
	}
	if json.Unmarshal(data, &meta) != nil || meta.Deleted {
		return ObjectEntry{}, false
	}
	return ObjectEntry{Name: string(name), Size: meta.Size, Chunks: meta.Chunks, NUID: meta.NUID}, true
}
