package ledger

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// Only the leader's stream info answer gives the stream's end: a replica
// answering from its own copy (while the stream has no leader, or as a
// freshly restarted preferred peer) is not taken.
func TestLeaderInfo(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		seq        uint64
		leader     bool
		err        string
	}{
		{"the leader", `{"state":{"last_seq":42},"cluster":{"leader":"n1","replicas":[{"name":"n2"},{"name":"n3"}]}}`, 42, true, ""},
		{"a follower's own copy", `{"state":{"last_seq":41},"cluster":{"leader":"n1","replicas":[{"name":"n1"},{"name":"n3"}]}}`, 0, false, ""},
		{"no leader", `{"state":{"last_seq":41},"cluster":{"replicas":[{"name":"n1"},{"name":"n2"},{"name":"n3"}]}}`, 0, false, "no leader"},
		{"a single server", `{"state":{"last_seq":7}}`, 7, true, ""},
		{"a single server naming itself", `{"state":{"last_seq":7},"cluster":{"leader":"s"}}`, 7, true, ""},
		{"an error", `{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}`, 0, false, "temporarily unavailable"},
		{"no responders", ``, 0, false, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq, leader, err := leaderInfo(&nats.Msg{Data: []byte(tc.body)})
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.seq, seq)
			require.Equal(t, tc.leader, leader)
		})
	}
}
