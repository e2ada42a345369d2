package web

import (
	"net/http"
	"time"

	"github.com/cairn-db/cairn/broker/influx"
	"github.com/gin-gonic/gin"
)

// InfluxDB 2.x's probes, which influxdb-client-go's Health() and Ready()
// (and load balancers set up for InfluxDB) call: GET /health answers
// whether the process serves, GET /ready whether it is ready, in 2.x's
// shapes. Open like /api/v1/health and /api/v1/ready: they reveal nothing
// but liveness.

func (s *Server) influxHealth(c *gin.Context) {
	c.Header("X-Influxdb-Version", influx.Version)
	body := gin.H{"name": "influxdb", "message": "ready for queries and writes", "status": "pass",
		"checks": []any{}, "version": influx.Version, "commit": ""}
	if waiting := s.waiting(); waiting != "" {
		body["message"], body["status"] = "not ready: "+waiting, "fail"
		c.JSON(http.StatusServiceUnavailable, body)
		return
	}
	c.JSON(http.StatusOK, body)
}

func (s *Server) influxReady(c *gin.Context) {
	c.Header("X-Influxdb-Version", influx.Version)
	body := gin.H{"status": "ready", "started": s.started.UTC().Format(time.RFC3339Nano),
		"up": time.Since(s.started).Round(time.Millisecond).String()}
	if waiting := s.waiting(); waiting != "" {
		body["status"], body["message"] = "not ready", waiting
		c.JSON(http.StatusServiceUnavailable, body)
		return
	}
	c.JSON(http.StatusOK, body)
}
