package web_test

import (
	"fmt"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/web"
	"github.com/stretchr/testify/require"
)

// TestHealthNamesTheWriteFence: /api/v1/health answers 503 naming the cause
// while the storage role refuses writes, and 200 again once it takes them.
func TestHealthNamesTheWriteFence(t *testing.T) {
	var fenced error
	h := web.New(web.Config{NodeID: "n1", State: newState(t), Storage: testStorage{fence: func() error { return fenced }}}).Handler()
	code, body := do(t, h, "GET", "/api/v1/health", "")
	require.Equal(t, 200, code)
	require.Equal(t, "ok", body["status"])
	fenced = fmt.Errorf("%w: disk_full at /d/log.d/1.wal: no space left on device", models.ErrInsufficientStorage)
	code, body = do(t, h, "GET", "/api/v1/health", "")
	require.Equal(t, 503, code)
	require.Equal(t, "unhealthy", body["status"])
	require.Contains(t, body["cause"], "no space left on device")
	require.Contains(t, body["cause"], "/d/log.d/1.wal")
	fenced = nil
	code, _ = do(t, h, "GET", "/api/v1/health", "")
	require.Equal(t, 200, code)
}

// TestFaultInjectionOnlyWhenEnabled: POST /api/v1/debug/faults is 404
// unless the node was started with --fault-injection; enabled, it takes
// the admin token, refuses a bad kind and changes nothing then.
func TestFaultInjectionOnlyWhenEnabled(t *testing.T) {
	h := web.New(web.Config{State: newState(t)}).Handler()
	code, _ := do(t, h, "POST", "/api/v1/debug/faults", `{"disk":"full"}`)
	require.Equal(t, 404, code)

	var got []string
	h = web.New(web.Config{State: newState(t), Tokens: web.Tokens{Admin: "s3cret"},
		Storage: testStorage{faults: func(disk string) { got = append(got, disk) }}}).Handler()
	code, _ = do(t, h, "POST", "/api/v1/debug/faults", `{"disk":"full"}`)
	require.Equal(t, 401, code)
	code, body := do(t, h, "POST", "/api/v1/debug/faults", `{"disk":"melted"}`, "Authorization", "Bearer s3cret")
	require.Equal(t, 400, code)
	require.Contains(t, body["error"].(map[string]any)["message"], "melted")
	require.Empty(t, got)
	for _, disk := range []string{"full", "error", ""} {
		code, _ = do(t, h, "POST", "/api/v1/debug/faults", fmt.Sprintf(`{"disk":%q}`, disk), "Authorization", "Bearer s3cret")
		require.Equal(t, 204, code)
	}
	require.Equal(t, []string{"full", "error", ""}, got)
}
