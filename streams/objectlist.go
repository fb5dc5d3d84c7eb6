package streams

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
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
	// Link: its meta links to another object (ObjectStore.Get reads that
	// one instead, following links without a bound on their number, one
	// to itself included, until its read times out).
	Link bool
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
	prefix, stream := "$O."+bucket+".M.", "OBJ_"+bucket
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{prefix + ">"},
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		InactiveThreshold: listInactive,
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, jetstream.ErrBucketNotFound
		}
		return nil, fmt.Errorf("streams: listing %s: %w", bucket, err)
	}
	// Stopping an ordered pull consumer's messages leaves it on the server
	// until its inactive threshold (5 minutes by default): a replica lists
	// the bucket at every snapshot it writes, and piled them up.
	defer func() {
		if info := cons.CachedInfo(); info != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listInactive)
			_ = js.DeleteConsumer(dctx, stream, info.Name)
			cancel()
		}
	}()
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

// listInactive is how long the server keeps a ListObjects consumer whose
// delete did not reach it.
const listInactive = 10 * time.Second

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
		Options *struct {
			Link json.RawMessage `json:"link"`
		} `json:"options"`
	}
	if json.Unmarshal(data, &meta) != nil || meta.Deleted {
		return ObjectEntry{}, false
	}
	link := meta.Options != nil && len(meta.Options.Link) > 0 && string(meta.Options.Link) != "null"
	return ObjectEntry{Name: string(name), Size: meta.Size, Chunks: meta.Chunks, NUID: meta.NUID, Link: link}, true
}

// PlainNUID reports whether nuid can name an object's chunks: one subject
// token, no wildcard. A meta naming "*" or ">" would have its reader
// subscribe to every object's chunks, and its deleter purge them all.
func PlainNUID(nuid string) bool {
	return nuid != "" && !strings.ContainsAny(nuid, ".*> \t\r\n")
}

// ObjectHasChunks reports whether bucket's stream holds a chunk under nuid
// (one message get): an object whose meta names nuid can be read. An
// object store writes an object's chunks before its meta, so a meta
// naming none (or naming several objects' chunks with a wildcard) was
// written by someone else, and its read could only time out.
func ObjectHasChunks(ctx context.Context, js jetstream.JetStream, bucket, nuid string) (bool, error) {
	if !PlainNUID(nuid) {
		return false, nil
	}
	s, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		return false, err
	}
	_, err = s.GetLastMsgForSubject(ctx, "$O."+bucket+".C."+nuid)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

// DeleteObjectMeta marks object name of bucket deleted as ObjectStore.Delete
// does (a deleted meta that rolls up its subject), without purging the
// chunks its meta names: a forged meta may name another object's chunks,
// or all of them ("$O.<bucket>.C.>"), and deleting it must not delete
// theirs.
func DeleteObjectMeta(ctx context.Context, js jetstream.JetStream, bucket, name string) error {
	data, err := json.Marshal(jetstream.ObjectInfo{ObjectMeta: jetstream.ObjectMeta{Name: name}, Bucket: bucket, Deleted: true})
	if err != nil {
		return err
	}
	m := nats.NewMsg("$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name)))
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Data = data
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("streams: deleting %s of %s: %w", name, bucket, err)
	}
	return nil
}

// PurgeOrphanChunks purges the chunks in bucket that no live object's meta
// names (live: the NUIDs of ListObjects' entries) and that are older than
// age (their newest chunk), and returns how many objects' chunks it purged.
// An object store writes an object's chunks before its meta, so chunks
// without a meta are an object whose writer died or gave up mid-write (a
// replica killed while it wrote a snapshot): nothing reads them and
// nothing else would ever delete them. age keeps an object still being
// written, whose meta is not there yet, from being taken for one.
func PurgeOrphanChunks(ctx context.Context, js jetstream.JetStream, bucket string, live map[string]bool, age time.Duration) (int, error) {
	s, err := js.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		return 0, err
	}
	prefix := "$O." + bucket + ".C."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return 0, fmt.Errorf("streams: listing the chunks of %s: %w", bucket, err)
	}
	purged := 0
	for subject := range info.State.Subjects {
		if live[strings.TrimPrefix(subject, prefix)] {
			continue
		}
		last, err := s.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return purged, fmt.Errorf("streams: reading %s: %w", subject, err)
		}
		if time.Since(last.Time) < age {
			continue
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			return purged, fmt.Errorf("streams: purging %s: %w", subject, err)
		}
		purged++
	}
	return purged, nil
}
