package web

import (
	"errors"
	"net/http"

	"github.com/cairn-db/cairn/coordinator"
	"github.com/cairn-db/cairn/models"
	"github.com/gin-gonic/gin"
)

// errorBody is the JSON error envelope of every failed call.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// statusOf maps error sentinels to HTTP statuses: the one place that does.
func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, models.ErrBadInput):
		return http.StatusBadRequest, "bad_request"
	case errors.Is(err, models.ErrUnauthorized):
		return http.StatusUnauthorized, "unauthorized"
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden, "forbidden"
	case errors.Is(err, models.ErrNotFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, models.ErrConflict):
		return http.StatusConflict, "conflict"
	case errors.Is(err, models.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, models.ErrImpossible):
		return http.StatusUnprocessableEntity, "unprocessable"
	// Both before the generic 503: the client must learn that etcd is full
	// (an operator has to act) or that its change may have been applied.
	case errors.Is(err, coordinator.ErrNoSpace):
		return http.StatusServiceUnavailable, "etcd_nospace"
	case errors.Is(err, coordinator.ErrOutcomeUnknown):
		return http.StatusServiceUnavailable, "outcome_unknown"
	case errors.Is(err, models.ErrUnavailable), errors.Is(err, coordinator.ErrUnavailable),
		errors.Is(err, coordinator.ErrDeposed):
		return http.StatusServiceUnavailable, "unavailable"
	}
	return http.StatusInternalServerError, "internal"
}

// fail writes the envelope for err and stops the chain.
func fail(c *gin.Context, err error) {
	status, code := statusOf(err)
	c.AbortWithStatusJSON(status, errorBody{Error: errorDetail{Code: code, Message: err.Error()}})
}

// StatusOf is the HTTP status an error answers with (metrics label their
// requests with it).
func StatusOf(err error) int {
	if err == nil {
		return http.StatusOK
	}
	status, _ := statusOf(err)
	return status
}
