package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spendgate/spendgate/testenv"
)

// readmeBlock is one indented code block of a documentation file.
type readmeBlock struct {
	line  int // 1-based line of its first line
	lines []string
	nums  []int // 1-based line of each of lines (a blank line in a block is not one)
}

// docFiles are the files whose examples the README tests run, relative to
// the repository's root: README.md first, then docs/*.md in name order.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	files := []string{"README.md"}
	for _, d := range docs {
		files = append(files, filepath.ToSlash(filepath.Join("docs", filepath.Base(d))))
	}
	slices.Sort(files[1:])
	return files
}

// docText is the text of a documentation file (README.md, docs/guide.md...).
func docText(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(name)))
	require.NoError(t, err)
	return string(data)
}

// readmeBlocks returns a documentation file's indented code blocks, in
// order; fenced (```) blocks are illustrative and left out.
func readmeBlocks(t *testing.T, name string) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	var cur *readmeBlock
	inFence := false
	for i, l := range strings.Split(docText(t, name), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
			continue
		}
		if !inFence && strings.HasPrefix(l, "    ") && !strings.HasPrefix(strings.TrimSpace(l), "|") {
			if cur == nil {
				blocks = append(blocks, readmeBlock{line: i + 1})
				cur = &blocks[len(blocks)-1]
			}
			cur.lines = append(cur.lines, l[4:])
			cur.nums = append(cur.nums, i+1)
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

// readmeSkipped says why a command line of a documentation file is not
// run here, or "" if it is. Each skipped command runs elsewhere: serve is
// started by the test itself, the test command is CI's, the Node example
// is run by .ci/run, bench and demo by their own tests.
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

// updateDocs makes TestREADME_RunsAsPrinted write the replies it got into
// the files in place of the ones they print, where the two differ (ids of
// the file's own earlier replies kept): go test -run TestREADME_RunsAsPrinted
// ./cmd/spendgate/ -update-docs, then read the diff.
var updateDocs = flag.Bool("update-docs", false, "rewrite the replies README.md and docs/*.md print with the ones the service gives")

// readmeRan counts what runDocExamples did.
type readmeRan struct{ cli, nats, compared, skipped int }

// TestREADME_RunsAsPrinted runs every spendgate and `nats req` command that
// README.md and each docs/*.md show, file by file, each file in its own
// order against its own fresh `spendgate serve`: the state each step meets
// is the one the file's earlier steps made, so every file can be followed
// on its own from a fresh start. CLI lines must exit 0; a `nats req` line is
// sent as printed (with the reservation id of the file's admit replaced by
// the one this run got) and its reply must equal the reply the file prints
// under it, field by field, but for ids, times and period instances. It
// fails when a file shows a reply the service does not give, a field it
// does not have, or a command that does not work.
func TestREADME_RunsAsPrinted(t *testing.T) {
	t.Parallel()
	var total readmeRan
	for _, name := range docFiles(t) {
		t.Run(name, func(t *testing.T) {
			ran := runDocExamples(t, name)
			t.Logf("%s: %d CLI lines and %d nats requests run (%d replies compared), %d skipped", name, ran.cli, ran.nats, ran.compared, ran.skipped)
			if name == "README.md" {
				require.GreaterOrEqual(t, ran.cli, 5, "the quick start's commands were not found")
				require.GreaterOrEqual(t, ran.compared, 4, "the core calls' replies were not found")
			}
			total.cli += ran.cli
			total.nats += ran.nats
			total.compared += ran.compared
			total.skipped += ran.skipped
		})
	}
	t.Logf("README: %d CLI lines and %d nats requests run (%d replies compared), %d skipped (README.md and docs/*.md)", total.cli, total.nats, total.compared, total.skipped)
	require.GreaterOrEqual(t, total.cli, 6, "the quick start's commands were not found")
	require.GreaterOrEqual(t, total.nats, 10, "the wire API's examples were not found")
	require.GreaterOrEqual(t, total.compared, 10, "the wire API's replies were not found")
}

// runDocExamples runs the examples of one documentation file against a
// fresh serve of its own, in a directory of its own.
func runDocExamples(t *testing.T, name string) readmeRan {
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	url := "nats://" + listen
	var ran readmeRan
	type item struct {
		line int
		text string
	}
	// Every line of every code block, in order: a reply the file prints
	// is the line after its request.
	var items []item
	for _, b := range readmeBlocks(t, name) {
		for i, l := range b.lines {
			items = append(items, item{b.nums[i], strings.TrimSpace(l)})
		}
	}
	isCLI := func(l string) bool {
		return strings.HasPrefix(l, "go run ./cmd/spendgate ") || strings.HasPrefix(l, "spendgate ") ||
			strings.HasPrefix(l, "R=$(go run ./cmd/spendgate ") || readmeCapture.MatchString(l)
	}
	runnable := false
	for _, it := range items {
		if (isCLI(it.text) || readmeNatsReq.MatchString(it.text)) && readmeSkipped(it.text) == "" {
			runnable = true
		}
	}
	if !runnable {
		return ran // nothing to run: no serve
	}
	// The file's commands run in the directory the quick start runs
	// serve from, so ./spendgate-data (its keys) is where they say.
	readmeDir = t.TempDir()
	startProc(t, true, "serve", "--data-dir", filepath.Join(readmeDir, "spendgate-data"), "--listen", listen)
	nc := connect(t, url)

	var shell []string // CLI lines, run in one shell so variables carry
	// rsvIDs maps each reservation id the file prints to the one this
	// run got: the file's first admit's id is the one its settle and
	// release lines use; another admit's reply maps its own.
	lastRsv, rsvIDs := "", map[string]string{}
	updates := map[int]string{} // with -update-docs: line -> the reply got
	for ii, it := range items {
		l := it.text
		cli := isCLI(l)
		m := readmeNatsReq.FindStringSubmatch(l)
		if !cli && m == nil {
			continue
		}
		if why := readmeSkipped(l); why != "" {
			ran.skipped++
			continue
		}
		if cli {
			bin := binPath
			if _, rest, ok := strings.Cut(l, "spendgate "); ok {
				bin = clientBin(strings.Fields(rest)...)
			}
			l = strings.ReplaceAll(l, "go run ./cmd/spendgate ", bin+" ")
			if strings.HasPrefix(l, "spendgate ") {
				l = bin + strings.TrimPrefix(l, "spendgate")
			}
			l = strings.Replace(l, "$(spendgate ", "$("+bin+" ", 1)
			shell = append(shell, "echo "+shellQuote("$ "+it.text)+" >&2", l)
			ran.cli++
			continue
		}
		// Run the shell lines before a request: order matters.
		runReadmeShell(t, url, shell)
		shell = nil
		subject, payload := m[1], m[2]
		if rid := readmeRsv.FindString(payload); rid != "" {
			if rsvIDs[rid] == "" {
				require.NotEmpty(t, lastRsv, "%s line %d settles a reservation no earlier step opened", name, it.line)
				rsvIDs[rid] = lastRsv
			}
			payload = strings.ReplaceAll(payload, rid, rsvIDs[rid])
		}
		msg, err := nc.Request(subject, []byte(payload), 10*time.Second)
		require.NoError(t, err, "%s line %d: %s", name, it.line, l)
		ran.nats++
		var got map[string]any
		require.NoError(t, json.Unmarshal(msg.Data, &got), string(msg.Data))
		if id, ok := got["reservation_id"].(string); ok && subject == "spendgate.admit" && lastRsv == "" {
			lastRsv = id
		}
		if ii+1 >= len(items) || !strings.HasPrefix(items[ii+1].text, "{") {
			continue // the file prints no reply for this one
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
		require.NoError(t, json.Unmarshal([]byte(want), &wantV), "%s line %d", name, items[ii+1].line)
		readmeNormalize(wantV)
		readmeNormalize(got)
		ran.compared++
		if *updateDocs {
			if !reflect.DeepEqual(wantV, got) {
				reply := string(msg.Data)
				for docID, runID := range rsvIDs {
					reply = strings.ReplaceAll(reply, runID, docID)
				}
				updates[items[ii+1].line] = reply
			}
			continue
		}
		require.Equal(t, wantV, got, "%s line %d: %s\nreply: %s", name, it.line, l, msg.Data)
	}
	runReadmeShell(t, url, shell)
	if len(updates) > 0 {
		path := filepath.Join("..", "..", filepath.FromSlash(name))
		lines := strings.Split(docText(t, name), "\n")
		for line, reply := range updates {
			indent := lines[line-1][:len(lines[line-1])-len(strings.TrimLeft(lines[line-1], " "))]
			lines[line-1] = indent + reply
		}
		require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644))
		t.Logf("%s: %d replies rewritten (-update-docs)", name, len(updates))
	}
	return ran
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
			case "instance", "expires_at", "resets_at", "at", "defined_at", "retired_at", "version", "price_version", "position":
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
// dir (./spendgate-data) and a file's commands in (one per file).
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

// readmeGoSources are the files whose code README.md and docs/*.md quote.
var readmeGoSources = []string{"../../client/example_test.go", "../../testenv/readme_test.go"}

// TestREADME_GoSnippetsAreTested: every Go snippet of README.md and
// docs/*.md appears, line for line (indentation aside), in an example or
// test that go test runs, so a snippet that stops compiling or working
// fails a test.
func TestREADME_GoSnippetsAreTested(t *testing.T) {
	t.Parallel()
	var src [][]string
	for _, path := range readmeGoSources {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		src = append(src, trimmedLines(string(data)))
	}
	n := 0
	for _, name := range docFiles(t) {
		for _, b := range readmeBlocks(t, name) {
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
			require.True(t, found, "the Go snippet at %s line %d is not in %v:\n%s", name, b.line, readmeGoSources, strings.Join(b.lines, "\n"))
		}
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

// readmeNodeSources are the files whose code the README's Node.js
// snippets quote; .ci/run runs them (examples/node's tests, and the
// gateway quick start through examples/gateway-node's).
var readmeNodeSources = []string{"../../examples/node/example.mjs", "../../examples/gateway-node/quickstart.mjs"}

// TestREADME_NodeSnippetIsTested: each of the README's ```js blocks
// appears, line for line (indentation aside), in one of
// readmeNodeSources, which .ci/run runs, so a snippet cannot drift from
// code that works.
func TestREADME_NodeSnippetIsTested(t *testing.T) {
	t.Parallel()
	var srcs [][]string
	for _, f := range readmeNodeSources {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		srcs = append(srcs, trimmedLines(string(data)))
	}
	n := 0
	var block []string
	in := false
	for _, l := range strings.Split(docText(t, "README.md"), "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```js":
			in, block = true, nil
		case in && strings.TrimSpace(l) == "```":
			in = false
			n++
			want := trimmedLines(strings.Join(block, "\n"))
			found := false
			for _, src := range srcs {
				found = found || containsRun(src, want)
			}
			require.True(t, found, "the README's Node.js snippet is in none of %v:\n%s", readmeNodeSources, strings.Join(block, "\n"))
		case in:
			block = append(block, l)
		}
	}
	require.GreaterOrEqual(t, n, 1, "the README's Node.js snippet was not found")
}
