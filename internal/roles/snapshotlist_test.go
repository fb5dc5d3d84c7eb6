package roles_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/roles"
	"github.com/spendgate/spendgate/streams"
)

// TestRoles_ListSnapshotObjects: the replica and finance logins may list
// the snapshot bucket with streams.ListObjects (an ordered pull consumer on
// its meta subjects, in place of the object store's push watcher) and read
// an object in it. How it can fail: a role without the consumer's create,
// next or delete subjects gets a permission violation or a timeout.
func TestRoles_ListSnapshotObjects(t *testing.T) {
	t.Parallel()
	l := streams.Default()
	exportPasswords(t, roles.Names...)
	conf, err := roles.Authorization(roles.All(l), roles.DefaultUsers())
	require.NoError(t, err)
	s := startConf(t, conf, true, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep := dialRole(t, s, l, roles.Replica)
	rjs, err := jetstream.New(rep.nc)
	require.NoError(t, err)
	store, err := streams.EnsureSnapshots(ctx, rjs, l)
	require.NoError(t, err)
	_, err = store.PutBytes(ctx, streams.SnapshotName(7), []byte("header\nbody"))
	require.NoError(t, err)
	for _, role := range []string{roles.Replica, roles.Finance} {
		id := dialRole(t, s, l, role)
		js, err := jetstream.New(id.nc)
		require.NoError(t, err)
		objs, err := streams.ListObjects(ctx, js, l.SnapshotBucket(), nil)
		require.NoError(t, err, role)
		require.Len(t, objs, 1, role)
		require.Equal(t, streams.SnapshotName(7), objs[0].Name, role)
		st, err := js.ObjectStore(ctx, l.SnapshotBucket())
		require.NoError(t, err, role)
		data, err := streams.ReadObject(ctx, st, objs[0].Name)
		require.NoError(t, err, role)
		require.Equal(t, "header\nbody", string(data), role)
		select {
		case err := <-id.errs:
			t.Fatalf("%s: %v", role, err)
		default:
		}
	}
}
