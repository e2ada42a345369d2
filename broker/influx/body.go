package influx

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/cairn-db/cairn/models"
)

// ErrBadEncoding: a Content-Encoding other than identity or gzip, or a gzip
// stream that does not decode (a bad input: 400).
var ErrBadEncoding = fmt.Errorf("%w: bad content encoding", models.ErrBadInput)

// ReadBody reads a write request's body, gunzipping it when
// Content-Encoding says gzip, and refuses one whose decompressed size passes
// limit (models.ErrTooLarge): a small gzip body must not expand into
// gigabytes in memory. The body may be a buffer of an earlier request's
// (ReleaseBody).
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
	body, err := readAll(io.LimitReader(src, limit+1), sizeHint(r, src, limit))
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

// maxUpfront bounds the buffer a body's declared length buys before its
// bytes arrive: a sender that declares 32 MiB and trickles 3 bytes holds
// at most this (for at most --write-body-timeout), not what it declared;
// the in-flight budget (web/inflight.go) charges bytes as they arrive.
// A batch of 5,000 points or 1,000 Telegraf metrics fits in it.
const maxUpfront = 1 << 20

// sizeHint is the size the body says it has, when it is read as sent and
// within limit, at most maxUpfront; else 0 (unknown).
func sizeHint(r *http.Request, src io.Reader, limit int64) int64 {
	if src != r.Body || r.ContentLength <= 0 || r.ContentLength > limit {
		return 0
	}
	return min(r.ContentLength, maxUpfront)
}

// readAll reads src to its end into one buffer of hint bytes (and room for
// the read that finds the end) when hint is known: io.ReadAll grows a
// buffer by steps and copies the whole into a final one, which was a
// quarter of the bytes a write allocated (issue 21). A body longer than
// the hint grows the buffer as its bytes arrive.
func readAll(src io.Reader, hint int64) ([]byte, error) {
	if hint <= 0 {
		return io.ReadAll(src)
	}
	var b []byte
	if p, _ := bodies.Get().(*[]byte); p != nil && int64(cap(*p)) >= hint+bytes.MinRead {
		b = (*p)[:0]
	} else {
		b = make([]byte, 0, hint+bytes.MinRead)
	}
	buf := bytes.NewBuffer(b)
	_, err := buf.ReadFrom(src)
	return buf.Bytes(), err
}

// bodies holds the buffers of bodies released: with 32 senders of
// 5,000-point batches the bodies were a sixth of the bytes the node
// allocated (issue 21).
var bodies sync.Pool

// maxPooledBody bounds a body buffer kept for the next request.
const maxPooledBody = 2 * maxUpfront

// ReleaseBody gives a body ReadBody returned back for a later request's.
// The caller must be done with it, and so must everything the body went to:
// a write's points are strings of their body (lineproto.Options.Given), so
// only a write that returned nil (every shard's entry committed, nothing of
// it held by a retry or a timed-out wait) may release its body. A body not
// released is the collector's.
func ReleaseBody(body []byte) {
	if cap(body) == 0 || cap(body) > maxPooledBody {
		return
	}
	body = body[:0]
	bodies.Put(&body)
}

// gzipErr is a failed gunzip: a bad encoding, unless reading the body
// itself failed for want of memory (the in-flight wait's 503).
func gzipErr(err error) error {
	if errors.Is(err, models.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: gzip: %w", ErrBadEncoding, err)
}
