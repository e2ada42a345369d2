package web

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// operators answers GET /api/v1/operators: the master's operators in flight
// (as persisted in etcd, so any node answers, master or not).
func (s *Server) operators(c *gin.Context) {
	v, err := s.cfg.Master.Operators(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, v)
}
