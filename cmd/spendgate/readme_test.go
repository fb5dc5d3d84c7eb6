package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readmeBlock is one indented code block of README.md.
type readmeBlock struct {
	line  int // 1-based line of its first line
	lines []string
}

// readmeBlocks returns README.md's indented code blocks, in order.
func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	var blocks []readmeBlock
	var cur *readmeBlock
	inFence := false
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
			continue
		}
		if !inFence && strings.HasPrefix(l, "    ") && !strings.HasPrefix(strings.TrimSpace(l), "|") {
			if cur == nil {
				blocks = append(blocks, readmeBlock{line: i + 1})
				cur = &blocks[len(blocks)-1]
			}
			cur.lines = append(cur.lines, l[4:])
			continue
		}
		if strings.TrimSpace(l) != "" || cur == nil {
			cur = nil
			continue
		}
		// A blank line inside a block keeps it open; a second ends it.
	}
	return blocks
}

var (
	readmeRsv     = regexp.MustCompile(`rsv_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	readmeNatsReq = regexp.MustCompile(`^nats req (\S+) '(.*)'$`)
)

// readmeCapture is a line that keeps a command's output in a shell
// variable: "export KEY=$(spendgate keys create ...)".
var readmeCapture = regexp.MustCompile(`^(export )?[A-Z_]+=\$\(spendgate `)

// readmeSkipped says why a command line of the README is not run here, or
// "" if it is. Each skipped command runs elsewhere: serve is started by the
// test itself, the test command is CI's, the Node example is run by
// .ci/run, bench and demo by their own tests.
func readmeSkipped(l string) string {
	switch {
	case strings.HasPrefix(l, "go run ./cmd/spendgate serve"), strings.HasPrefix(l, "spendgate serve"):
		return "the test runs serve itself"
	case strings.HasPrefix(l, "go test"), strings.HasPrefix(l, "go install"), strings.HasPrefix(l, "go build"):
		return "toolchain"
	case strings.Contains(l, " bench"), strings.Contains(l, " demo"):
		return "bench and demo have their own tests"
	case strings.Contains(l, "examples/node"):
		return ".ci/run runs the Node example"
	case strings.Contains(l, "examples/gateway-node"), strings.HasPrefix(l, "spendgate gateway"), strings.Contains(l, " spendgate gateway "):
		return "the gateway calls a paid provider here; TestGateway_Commands and .ci/run's SDK tests run it against a fake one"
	case strings.Contains(l, "[") && !strings.HasPrefix(l, "nats req"):
		return "a synopsis, not a command"
	}
	return ""
}

// TestREADME_RunsAsPrinted runs every spendgate and `nats req` command the
// README shows, in the README's order, against one fresh `spendgate serve`:
// the state each step meets is the one the README's earlier steps made.
// CLI lines must exit 0; a `nats req` line is sent as printed (with the
// reservation id of the README's admit replaced by the one this run got)
// and its reply must equal the reply the README prints under it, field by
// field, but for ids, times and period instances. It fails when the README
// shows a reply the service does not give, a field it does not have, or a
// command that does not work.
func TestREADME_RunsAsPrinted(t *testing.T) {
	t.Setenv("SPENDGATE_NATS_URL", "")
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	url := "nats://" + listen
	// The README's commands run in the directory the quick start runs
	// serve from, so ./spendgate-data (its keys) is where they say.
	readmeDir = t.TempDir()
	startProc(t, true, "serve", "--data-dir", filepath.Join(readmeDir, "spendgate-data"), "--listen", listen)
	nc := connect(t, url)

	// Every line of every code block, in order: a reply the README prints
	// is the line after its request.
	type item struct {
		line int
		text string
	}
	var items []item
	for _, b := range readmeBlocks(t) {
		for i, l := range b.lines {
			items = append(items, item{b.line + i, strings.TrimSpace(l)})
		}
	}
	var shell []string // CLI lines, run in one shell so variables carry
	// rsvIDs maps each reservation id the README prints to the one this
	// run got: the README's first admit's id is the one its settle and
	// release lines use; another admit's reply maps its own.
	lastRsv, rsvIDs := "", map[string]string{}
	ran := map[string]int{}
	for ii, it := range items {
		l := it.text
		isCLI := strings.HasPrefix(l, "go run ./cmd/spendgate ") || strings.HasPrefix(l, "spendgate ") ||
			strings.HasPrefix(l, "R=$(go run ./cmd/spendgate ") || readmeCapture.MatchString(l)
		m := readmeNatsReq.FindStringSubmatch(l)
		if !isCLI && m == nil {
			continue
		}
		if why := readmeSkipped(l); why != "" {
			ran["skipped"]++
			continue
		}
		if isCLI {
			l = strings.ReplaceAll(l, "go run ./cmd/spendgate ", binPath+" ")
			if strings.HasPrefix(l, "spendgate ") {
				l = binPath + strings.TrimPrefix(l, "spendgate")
			}
			l = strings.Replace(l, "$(spendgate ", "$("+binPath+" ", 1)
			shell = append(shell, "echo "+shellQuote("$ "+it.text)+" >&2", l)
			ran["cli"]++
			continue
		}
		// Run the shell lines before a request: order matters.
		runReadmeShell(t, url, shell)
		shell = nil
		subject, payload := m[1], m[2]
		if rid := readmeRsv.FindString(payload); rid != "" {
			if rsvIDs[rid] == "" {
				require.NotEmpty(t, lastRsv, "README line %d settles a reservation no earlier step opened", it.line)
				rsvIDs[rid] = lastRsv
			}
			payload = strings.ReplaceAll(payload, rid, rsvIDs[rid])
		}
		msg, err := nc.Request(subject, []byte(payload), 10*time.Second)
		require.NoError(t, err, "README line %d: %s", it.line, l)
		ran["nats"]++
		var got map[string]any
		require.NoError(t, json.Unmarshal(msg.Data, &got), string(msg.Data))
		if id, ok := got["reservation_id"].(string); ok && subject == "spendgate.admit" && lastRsv == "" {
			lastRsv = id
		}
		if ii+1 >= len(items) || !strings.HasPrefix(items[ii+1].text, "{") {
			continue // the README prints no reply for this one
		}
		want := items[ii+1].text
		for _, rid := range readmeRsv.FindAllString(want, -1) {
			if rsvIDs[rid] == "" {
				if id, ok := got["reservation_id"].(string); ok {
					rsvIDs[rid] = id
				}
			}
			if rsvIDs[rid] != "" {
				want = strings.ReplaceAll(want, rid, rsvIDs[rid])
			}
		}
		var wantV map[string]any
		require.NoError(t, json.Unmarshal([]byte(want), &wantV), "README line %d", items[ii+1].line)
		readmeNormalize(wantV)
		readmeNormalize(got)
		require.Equal(t, wantV, got, "README line %d: %s\nreply: %s", it.line, l, msg.Data)
		ran["compared"]++
	}
	runReadmeShell(t, url, shell)
	t.Logf("README: %d CLI lines and %d nats requests run (%d replies compared), %d skipped", ran["cli"], ran["nats"], ran["compared"], ran["skipped"])
	require.GreaterOrEqual(t, ran["cli"], 6, "the quick start's commands were not found")
	require.GreaterOrEqual(t, ran["nats"], 10, "the wire API's examples were not found")
	require.GreaterOrEqual(t, ran["compared"], 10, "the wire API's replies were not found")
}

// readmeNormalize blanks the values that differ from run to run: times,
// period instances (today's date), the expiry, price versions (stream
// sequences, which move with every README step before them) and a report's
// stream position (it moves with every write any earlier step makes).
func readmeNormalize(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch k {
			case "instance", "expires_at", "at", "version", "price_version", "position":
				v[k] = "<" + k + ">"
			default:
				readmeNormalize(x)
			}
		}
	case []any:
		for _, x := range v {
			readmeNormalize(x)
		}
	}
}

// readmeDir is the directory TestREADME_RunsAsPrinted runs serve's data
// dir (./spendgate-data) and the README's commands in.
var readmeDir string

// runReadmeShell runs lines in one bash with SPENDGATE_NATS_URL set, in
// readmeDir (the files they write stay out of the checkout); every line
// must succeed.
func runReadmeShell(t *testing.T, url string, lines []string) {
	t.Helper()
	if len(lines) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := "set -euo pipefail\n" + strings.Join(lines, "\n") + "\n"
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = readmeDir
	if cmd.Dir == "" {
		cmd.Dir = t.TempDir()
	}
	cmd.Env = append(os.Environ(), "SPENDGATE_NATS_URL="+url, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("README shell:\n%s", out.String())
	require.NoError(t, err, "a README command failed:\n%s", out.String())
}

// shellQuote quotes s for bash, so that echoing a line does not run it.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// readmeGoSources are the files whose code the README quotes.
var readmeGoSources = []string{"../../client/example_test.go", "../../testenv/readme_test.go"}

// TestREADME_GoSnippetsAreTested: every Go snippet of the README appears,
// line for line (indentation aside), in an example or test that go test
// runs, so a snippet that stops compiling or working fails a test.
func TestREADME_GoSnippetsAreTested(t *testing.T) {
	var src [][]string
	for _, path := range readmeGoSources {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		src = append(src, trimmedLines(string(data)))
	}
	n := 0
	for _, b := range readmeBlocks(t) {
		if !readmeIsGo(b.lines) {
			continue
		}
		n++
		want := trimmedLines(strings.Join(b.lines, "\n"))
		found := false
		for _, lines := range src {
			if containsRun(lines, want) {
				found = true
			}
		}
		require.True(t, found, "the Go snippet at README line %d is not in %v:\n%s", b.line, readmeGoSources, strings.Join(b.lines, "\n"))
	}
	require.GreaterOrEqual(t, n, 2, "the README's Go snippets were not found")
}

// readmeIsGo says whether a block is Go code: it declares with := and is
// not a shell line.
func readmeIsGo(lines []string) bool {
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if strings.Contains(l, ":=") && !strings.HasPrefix(l, "R=$(") {
			return true
		}
	}
	return false
}

func trimmedLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// containsRun says whether want appears in lines as consecutive lines.
func containsRun(lines, want []string) bool {
	for i := 0; i+len(want) <= len(lines); i++ {
		if slices.Equal(lines[i:i+len(want)], want) {
			return true
		}
	}
	return false
}
