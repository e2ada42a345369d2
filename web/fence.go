package web

import (
	"fmt"
	"net/http"

	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

// health answers 200 while the node serves, and 503 with the cause while
// its storage role refuses writes (a full or failing disk): the node is up
// and heals by itself, but an operator must see why it takes no writes.
func (s *Server) health(c *gin.Context) {
	body := gin.H{"status": "ok", "node_id": s.cfg.NodeID, "roles": s.cfg.Roles,
		"is_master": s.cfg.Master.IsMaster()}
	if s.cfg.Storage != nil {
		if err := s.cfg.Storage.WriteFence(); err != nil {
			body["status"], body["cause"] = "unhealthy", err.Error()
			c.JSON(http.StatusServiceUnavailable, body)
			return
		}
	}
	c.JSON(http.StatusOK, body)
}

// faultRequest is POST /api/v1/debug/faults: which disk fault to inject
// into the storage role's write-ahead log ("" clears it).
type faultRequest struct {
	Disk string `json:"disk"` // "full", "error" or ""
}

// injectFault serves POST /api/v1/debug/faults, mounted only on a node
// started with --fault-injection.
func (s *Server) injectFault(c *gin.Context) {
	var req faultRequest
	if err := decodeStrict(c, &req); err != nil {
		fail(c, err)
		return
	}
	switch req.Disk {
	case "", "full", "error":
	default:
		fail(c, fmt.Errorf("%w: disk must be \"full\", \"error\" or \"\", not %q", models.ErrBadInput, req.Disk))
		return
	}
	s.cfg.Storage.InjectFault(req.Disk)
	c.Status(http.StatusNoContent)
}

// expectedRefusal: an answer above 499 that is no news in the log. A node
// fenced off writes logged its cause once at ERROR; the 507s of the writes
// it refuses meanwhile (a broker retries each until the failover) and its
// health's 503 (probed every few seconds) would bury it in WARN lines.
func expectedRefusal(c *gin.Context) bool {
	switch c.Writer.Status() {
	case http.StatusInsufficientStorage:
		return true
	case http.StatusServiceUnavailable:
		return c.FullPath() == "/api/v1/health"
	}
	return false
}
