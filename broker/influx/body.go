package influx

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/cairn-db/cairn/models"
)

// ErrBadEncoding: a Content-Encoding other than identity or gzip, or a gzip
// stream that does not decode (a bad input: 400).
var ErrBadEncoding = fmt.Errorf("%w: bad content encoding", models.ErrBadInput)

// ReadBody reads a write request's body, gunzipping it when
// Content-Encoding says gzip, and refuses one whose decompressed size passes
// limit (models.ErrTooLarge): a small gzip body must not expand into
// gigabytes in memory.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	var src io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, gzipErr(err)
		}
		defer zr.Close()
		src = zr
	default:
		return nil, fmt.Errorf("%w: %q (identity or gzip)", ErrBadEncoding, enc)
	}
	body, err := io.ReadAll(io.LimitReader(src, limit+1))
	var maxErr *http.MaxBytesError
	switch {
	case errors.As(err, &maxErr):
		return nil, fmt.Errorf("%w: request body more than %d bytes", models.ErrTooLarge, maxErr.Limit)
	case err != nil && src != r.Body:
		return nil, gzipErr(err)
	case err != nil:
		return nil, fmt.Errorf("reading body: %w", err)
	case int64(len(body)) > limit:
		return nil, fmt.Errorf("%w: request body more than %d bytes once decompressed", models.ErrTooLarge, limit)
	}
	return body, nil
}

// gzipErr is a failed gunzip: a bad encoding, unless reading the body
// itself failed for want of memory (the in-flight wait's 503).
func gzipErr(err error) error {
	if errors.Is(err, models.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: gzip: %w", ErrBadEncoding, err)
}
