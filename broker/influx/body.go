package influx

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// ErrBodyTooLarge: a request body, after decompression, past the limit.
var ErrBodyTooLarge = errors.New("request body too large")

// ErrBadEncoding: a Content-Encoding other than identity or gzip, or a gzip
// stream that does not decode.
var ErrBadEncoding = errors.New("bad content encoding")

// ReadBody reads a write request's body, gunzipping it when
// Content-Encoding says gzip, and refuses one whose decompressed size passes
// limit: a small gzip body must not expand into gigabytes in memory.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	var src io.Reader = r.Body
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %w", ErrBadEncoding, err)
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
		return nil, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, maxErr.Limit)
	case err != nil && src != r.Body:
		return nil, fmt.Errorf("%w: gzip: %w", ErrBadEncoding, err)
	case err != nil:
		return nil, fmt.Errorf("reading body: %w", err)
	case int64(len(body)) > limit:
		return nil, fmt.Errorf("%w: more than %d bytes once decompressed", ErrBodyTooLarge, limit)
	}
	return body, nil
}
