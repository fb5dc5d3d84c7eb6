package testenv

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// ForgeObjectMeta publishes info as the meta of object info.Name in object
// store bucket, on the bucket's meta subject ($O.<bucket>.M.<name>), as
// anyone allowed to publish there could: nothing checks that its size,
// chunk count, digest or NUID are those of chunks in the bucket. The
// meta's bucket is set to bucket.
func ForgeObjectMeta(t testing.TB, js jetstream.JetStream, bucket string, info jetstream.ObjectInfo) {
	t.Helper()
	info.Bucket = bucket
	data, err := json.Marshal(info)
	require.NoError(t, err)
	_, err = js.Publish(context.Background(), "$O."+bucket+".M."+base64.URLEncoding.EncodeToString([]byte(info.Name)), data)
	require.NoError(t, err)
}

// ForgeObjectChunk publishes data as a chunk of the object whose meta
// names nuid in bucket ($O.<bucket>.C.<nuid>).
func ForgeObjectChunk(t testing.TB, js jetstream.JetStream, bucket, nuid string, data []byte) {
	t.Helper()
	_, err := js.Publish(context.Background(), "$O."+bucket+".C."+nuid, data)
	require.NoError(t, err)
}
