package web

import (
	"context"
	"fmt"
	"net/http"

	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

// History serves the console's charts: this node's own ring of samples, and
// every live node's gathered by this one.
type History interface {
	Node() models.HistorySeries
	Cluster(ctx context.Context) models.HistoryCluster
}

// history answers GET /api/v1/history[?scope=cluster|node]: by default every
// live node's samples (the console's charts), with scope=node only this
// node's (what the fan-out fetches from each peer).
func (s *Server) history(c *gin.Context) {
	if s.cfg.History == nil {
		fail(c, fmt.Errorf("%w: this node keeps no history", models.ErrNotFound))
		return
	}
	switch scope := c.DefaultQuery("scope", "cluster"); scope {
	case "node":
		c.JSON(http.StatusOK, s.cfg.History.Node())
	case "cluster":
		c.JSON(http.StatusOK, s.cfg.History.Cluster(c.Request.Context()))
	default:
		fail(c, fmt.Errorf("%w: invalid scope %q: want cluster or node", models.ErrBadInput, scope))
	}
}

// historyNode answers GET /internal/v1/history: this node's own samples.
func (s *Server) historyNode(c *gin.Context) {
	if s.cfg.History == nil {
		fail(c, fmt.Errorf("%w: this node keeps no history", models.ErrNotFound))
		return
	}
	c.JSON(http.StatusOK, s.cfg.History.Node())
}
