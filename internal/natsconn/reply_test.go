package natsconn_test

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/internal/natsconn"
	"github.com/spendgate/spendgate/testenv"
)

// Under roles a replica may reply only to requests it received on its own
// connection (allow_responses); after a reconnect the server refuses its
// answers to requests taken before it. Those refusals are expected (the
// callers retry), so the first after a reconnect is a warning that says
// so and the rest are at debug level; any other refusal stays an error.
// How we know it can fail: every refusal was an ERROR "nats async error"
// line, one per answer, seen on a 3-node cluster after a node stopped;
// this test reproduces it on one server by forcing the replier's
// connection to reconnect between a request and its answer.
func TestConnect_AnswersRefusedAfterAReconnectAreNotErrors(t *testing.T) {
	clearEnv(t)
	s := startConf(t, `authorization { users = [
  {user: replier, password: "r-pw", permissions: {publish: {allow: ["only.this"]}, subscribe: {allow: ["svc", "_INBOX_r.>"]}, allow_responses: true}}
  {user: caller, password: "c-pw", permissions: {publish: {allow: ["svc"]}, subscribe: {allow: ["_INBOX.>"]}}}
] }
`)
	var logs testenv.LogBuffer
	o := natsconn.Options{URL: s.ClientURL(), User: "replier", Password: "r-pw", InboxPrefix: "_INBOX_r", Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	replier, err := o.Connect("replier", nats.ReconnectWait(10*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(replier.Close)
	taken := make(chan *nats.Msg, 2)
	_, err = replier.Subscribe("svc", func(m *nats.Msg) { taken <- m })
	require.NoError(t, err)
	require.NoError(t, replier.Flush())

	caller, err := nats.Connect(s.ClientURL(), nats.UserInfo("caller", "c-pw"))
	require.NoError(t, err)
	t.Cleanup(caller.Close)
	inbox := nats.NewInbox()
	answers, err := caller.SubscribeSync(inbox + ".*")
	require.NoError(t, err)
	var msgs []*nats.Msg
	for i := range 2 {
		// A reply subject of its own per request, as nats.go's requests
		// have (the server tracks allowed answers by reply subject).
		require.NoError(t, caller.PublishRequest("svc", inbox+"."+strconv.Itoa(i), []byte("q")))
		select {
		case m := <-taken:
			msgs = append(msgs, m)
		case <-time.After(10 * time.Second):
			t.Fatal("the replier did not get the request")
		}
	}

	// Before a reconnect the answer goes through.
	require.NoError(t, msgs[0].Respond([]byte("a")))
	_, err = answers.NextMsg(5 * time.Second)
	require.NoError(t, err, "the answer before the reconnect: %s", logs.String())
	// Publishing what the role may not, at any time, is an error.
	require.NoError(t, replier.Publish("not.allowed", nil))
	testenv.WaitFor(t, 10*time.Second, "the refused publish logged", func() bool {
		return strings.Contains(logs.String(), `level=ERROR msg="nats async error"`)
	})

	require.NoError(t, replier.ForceReconnect())
	testenv.WaitFor(t, 10*time.Second, "reconnected", func() bool {
		return replier.Stats().Reconnects >= 1 && replier.IsConnected()
	})
	// The second request was taken before the reconnect: its answer is
	// refused on the new connection.
	require.NoError(t, msgs[1].Respond([]byte("b")))
	require.NoError(t, msgs[1].Respond([]byte("b again")))
	testenv.WaitFor(t, 10*time.Second, "both refusals logged", func() bool {
		return strings.Count(logs.String(), "was refused") == 2
	})
	_, err = answers.NextMsg(200 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout, "the refused answers never reach the caller")

	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "level=ERROR"), "only the publish the role may not make is an error:\n%s", out)
	require.Equal(t, 1, strings.Count(out, `level=WARN msg="nats: an answer to a request taken before the reconnect was refused`), out)
	require.Equal(t, 1, strings.Count(out, `level=DEBUG msg="nats: an answer to a request taken before the reconnect was refused"`), out)
}
