package kv

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// etcd refusing a request because its apply is too far behind its commits
// is a retryable unavailability (503), and proves nothing was written.
func TestTooManyRequestsIsUnavailableBeforeProposing(t *testing.T) {
	for _, e := range []error{rpctypes.ErrTooManyRequests, rpctypes.Error(rpctypes.ErrGRPCRequestTooManyRequests)} {
		require.ErrorIs(t, mapErr(e), ErrUnavailable)
		w := mapWriteErr(e)
		require.ErrorIs(t, w, ErrUnavailable)
		require.NotErrorIs(t, w, ErrOutcomeUnknown)
	}
	require.ErrorIs(t, mapWriteErr(rpctypes.ErrTimeout), ErrOutcomeUnknown, "a timed out write may have been applied")
}
