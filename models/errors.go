package models

import "errors"

// API error sentinels. Wrap them with %w; the web package maps them to HTTP
// statuses in one place.
var (
	ErrBadInput     = errors.New("bad input")               // 400
	ErrNotFound     = errors.New("not found")               // 404
	ErrConflict     = errors.New("conflict")                // 409
	ErrImpossible   = errors.New("impossible")              // 422
	ErrUnavailable  = errors.New("temporarily unavailable") // 503
	ErrUnauthorized = errors.New("unauthorized")            // 401
	ErrTooLarge     = errors.New("too large")               // 413: over a size limit
)
