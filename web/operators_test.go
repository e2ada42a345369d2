package web_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/web"
	"github.com/stretchr/testify/require"
)

func TestOperatorsRoute(t *testing.T) {
	list := func(context.Context) (models.OperatorList, error) {
		return models.OperatorList{Operators: []models.Operator{{DB: "d", Shard: 1, Kind: models.OpMove}}, Unreadable: []string{}}, nil
	}
	h := web.New(web.Config{State: newState(t), Master: testMaster{ops: list}}).Handler()
	code, body := do(t, h, http.MethodGet, "/api/v1/operators", "")
	require.Equal(t, http.StatusOK, code)
	require.Len(t, body["operators"], 1)
	require.Equal(t, "move", body["operators"].([]any)[0].(map[string]any)["kind"])

	down := func(context.Context) (models.OperatorList, error) {
		return models.OperatorList{}, fmt.Errorf("%w: etcd down", models.ErrUnavailable)
	}
	h = web.New(web.Config{State: newState(t), Master: testMaster{ops: down}}).Handler()
	code, body = do(t, h, http.MethodGet, "/api/v1/operators", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "unavailable", body["error"].(map[string]any)["code"])

	h = web.New(web.Config{State: newState(t)}).Handler()
	code, _ = do(t, h, http.MethodGet, "/api/v1/operators", "")
	require.Equal(t, http.StatusNotFound, code)
}
