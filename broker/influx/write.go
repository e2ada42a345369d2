package influx

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

// v1Precisions maps 1.x's precision names (n, u, ms, s, m, h and the long
// forms) to the line-protocol parser's.
var v1Precisions = map[string]string{
	"": "ns", "n": "ns", "ns": "ns", "u": "us", "us": "us", "µ": "us",
	"ms": "ms", "s": "s", "m": "m", "h": "h",
}

var v2Precisions = map[string]string{"": "ns", "ns": "ns", "us": "us", "ms": "ms", "s": "s"}

// writeV1 is InfluxDB 1.x's POST /write?db=&rp=&precision=&u=&p=&consistency=.
// rp and consistency are accepted and ignored (one retention policy; every
// write waits for the in-sync replicas anyway).
func (h *Handler) writeV1(c *gin.Context) {
	db := c.Query("db")
	if db == "" {
		v1Error(c, http.StatusBadRequest, "database is required")
		return
	}
	precision, ok := v1Precisions[c.Query("precision")]
	if !ok {
		v1Error(c, http.StatusBadRequest, fmt.Sprintf("invalid precision %q (use n, u, ms, s, m or h)", c.Query("precision")))
		return
	}
	if err := h.write(c, db, precision); err != nil {
		status, msg := writeErr(err, db)
		v1Error(c, status, msg)
		return
	}
	c.Header("X-Influxdb-Version", Version)
	c.Status(http.StatusNoContent)
}

// writeV2 is InfluxDB 2.x's POST /api/v2/write?bucket=&org=&precision=. The
// bucket names the database; "db/rp" is accepted, the rp ignored.
func (h *Handler) writeV2(c *gin.Context) {
	bucket := c.Query("bucket")
	db, _, _ := strings.Cut(bucket, "/")
	if db == "" {
		v2Error(c, http.StatusBadRequest, "invalid", "bucket is required")
		return
	}
	precision, ok := v2Precisions[c.Query("precision")]
	if !ok {
		v2Error(c, http.StatusBadRequest, "invalid", fmt.Sprintf("invalid precision %q (use ns, us, ms or s)", c.Query("precision")))
		return
	}
	if err := h.write(c, db, precision); err != nil {
		status, msg := writeErr(err, db)
		code := "invalid"
		switch status {
		case http.StatusNotFound:
			code, msg = "not found", fmt.Sprintf("bucket %q not found", bucket)
		case http.StatusRequestEntityTooLarge:
			code = "request too large"
		case http.StatusServiceUnavailable:
			code = "unavailable"
		case http.StatusInternalServerError:
			code = "internal error"
		}
		v2Error(c, status, code, msg)
		return
	}
	c.Status(http.StatusNoContent)
}

func v2Error(c *gin.Context, status int, code, msg string) {
	c.AbortWithStatusJSON(status, gin.H{"code": code, "message": msg})
}

func (h *Handler) write(c *gin.Context, db, precision string) error {
	body, err := ReadBody(c.Request, h.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	if err := h.cfg.Backend.Write(c.Request.Context(), db, precision, body); err != nil {
		return err
	}
	ReleaseBody(body) // nil: nothing of the write holds its points (Backend.Write)
	return nil
}

// writeErr is a write error's status, from the one error table
// (models.Codes), and its message in InfluxDB's words.
func writeErr(err error, db string) (int, string) {
	status, _ := models.StatusOf(err)
	switch {
	case errors.As(err, new(*models.PartialWriteError)), errors.Is(err, ErrBadEncoding):
		// Already InfluxDB's own words: "partial write: ... dropped=N".
	case errors.Is(err, models.ErrNotFound):
		return status, fmt.Sprintf("database not found: %q", db)
	case errors.Is(err, models.ErrBadInput):
		return status, "unable to parse points: " + strings.TrimPrefix(err.Error(), models.ErrBadInput.Error()+": ")
	}
	return status, err.Error()
}
