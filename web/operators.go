package web

import (
	"context"
	"fmt"
	"net/http"

	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

// Operators lists the master's operators in flight (as persisted in etcd,
// so any node answers, master or not).
type Operators func(ctx context.Context) (models.OperatorList, error)

// operators answers GET /api/v1/operators.
func (s *Server) operators(c *gin.Context) {
	if s.cfg.Operators == nil {
		fail(c, fmt.Errorf("%w: this node does not list operators", models.ErrNotFound))
		return
	}
	v, err := s.cfg.Operators(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, v)
}
