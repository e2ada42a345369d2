package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-db/cairn/broker/influx"
	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

func (s *Server) requireData(c *gin.Context) bool {
	if s.data == nil {
		fail(c, fmt.Errorf("%w: this node has no data path (broker role)", models.ErrUnavailable))
		return false
	}
	return true
}

func (s *Server) route(c *gin.Context) {
	if !s.requireData(c) {
		return
	}
	out, err := s.data.Route(c.Query("db"), c.Query("series"))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

func (s *Server) write(c *gin.Context) {
	if !s.requireData(c) {
		return
	}
	body, err := influx.ReadBody(c.Request, s.cfg.WriteMaxBodyBytes)
	if errors.Is(err, models.ErrTooLarge) {
		fail(c, fmt.Errorf("%w: write body larger than %d bytes (--write-max-body-bytes, counted after gzip decompression); send smaller batches", models.ErrTooLarge, s.cfg.WriteMaxBodyBytes))
		return
	}
	if err != nil && !errors.Is(err, models.ErrUnavailable) && !errors.Is(err, models.ErrBadInput) {
		err = fmt.Errorf("%w: %w", models.ErrBadInput, err)
	}
	if err != nil {
		fail(c, err) // a body that waited too long for the in-flight budget: 503
		return
	}
	if err := s.data.Write(c.Request.Context(), c.Query("db"), c.Query("precision"), body); err != nil {
		fail(c, err)
		return
	}
	influx.ReleaseBody(body)
	c.Status(http.StatusNoContent)
}

// ParseTime accepts RFC 3339 or integer unix nanoseconds.
func ParseTime(name, v string) (int64, error) {
	if v == "" {
		return 0, fmt.Errorf("%w: missing %s", models.ErrBadInput, name)
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0, fmt.Errorf("%w: invalid %s %q: want RFC 3339 or unix nanoseconds", models.ErrBadInput, name, v)
	}
	return t.UnixNano(), nil
}

func (s *Server) query(c *gin.Context) {
	if !s.requireData(c) {
		return
	}
	q := models.Query{DB: c.Query("db"), Metric: c.Query("metric"), Tags: map[string]string{}}
	var err error
	if q.Start, err = ParseTime("start", c.Query("start")); err != nil {
		fail(c, err)
		return
	}
	if q.End, err = ParseTime("end", c.Query("end")); err != nil {
		fail(c, err)
		return
	}
	for _, t := range c.QueryArray("tag") {
		k, v, ok := strings.Cut(t, ":")
		if !ok || k == "" {
			fail(c, fmt.Errorf("%w: invalid tag %q: want key:value", models.ErrBadInput, t))
			return
		}
		q.Tags[k] = v
	}
	out, err := s.data.Query(c.Request.Context(), q)
	if err != nil {
		fail(c, err)
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", out)
}

// writePath is the route of data writes: its bodies have their own limit.
const writePath = "/api/v1/write"
