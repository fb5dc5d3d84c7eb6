package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// nodeFloor matches the lowest major version of a Node engines range
// (">=22", ">= 22.x", ">=18.0.0").
var nodeFloor = regexp.MustCompile(`^>=\s*(\d+)`)

// Each Node example declares the Node.js it needs as no older than what
// any package it locks declares: examples/node once said node >= 18
// while @nats-io/nuid 3.0.0 declares >= 22.
func TestExamples_NodeEngines(t *testing.T) {
	t.Parallel()
	manifests, err := filepath.Glob(filepath.Join("..", "..", "examples", "*", "package.json"))
	require.NoError(t, err)
	require.NotEmpty(t, manifests)
	floor := func(where, spec string) int {
		m := nodeFloor.FindStringSubmatch(spec)
		require.NotNil(t, m, "%s: engines.node %q is not >=N", where, spec)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		return n
	}
	type engines struct {
		Engines struct {
			Node string `json:"node"`
		} `json:"engines"`
	}
	for _, path := range manifests {
		var pkg engines
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &pkg))
		declared := floor(path, pkg.Engines.Node)
		var lock struct {
			Packages map[string]engines `json:"packages"`
		}
		lockPath := filepath.Join(filepath.Dir(path), "package-lock.json")
		data, err = os.ReadFile(lockPath)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &lock))
		require.Equal(t, pkg.Engines.Node, lock.Packages[""].Engines.Node, "%s and its lock file declare the same engines", path)
		for name, p := range lock.Packages {
			if name == "" || p.Engines.Node == "" {
				continue
			}
			require.GreaterOrEqual(t, declared, floor(lockPath+" "+name, p.Engines.Node),
				"%s declares node %s, but %s needs %s", path, pkg.Engines.Node, name, p.Engines.Node)
		}
	}
}
