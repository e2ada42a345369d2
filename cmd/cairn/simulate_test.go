package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// Bad simulate cluster flags exit 2 naming the bad value, before anything
// starts.
func TestSimulateClusterBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "cluster", "--nodes", "0"}, "--nodes 0"},
		{[]string{"simulate", "cluster", "--nodes", "2", "--replicas", "3"}, "--replicas 3"},
		{[]string{"simulate", "cluster", "--kill", "100", "--nodes", "5"}, "--kill 100"},
		{[]string{"simulate", "cluster", "--idle", "soon"}, "soon"},
		{[]string{"simulate", "cluster", "extra"}, `"extra"`},
	} {
		var out, errb bytes.Buffer
		require.Equal(t, 2, run(tc.args, &out, &errb), "%v", tc.args)
		require.Contains(t, errb.String(), tc.want)
		require.Empty(t, out.String())
	}
}
