package influx

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/cairn-db/cairn/models"
)

// The bounds of one /query request's text, checked before influxql parses
// it: its parser recurses once per parenthesis, so a few megabytes of "("
// overflow the goroutine stack and kill the process, and tens of thousands
// of levels cost seconds of CPU.
const (
	// DefaultQueryMaxBytes is Config.QueryMaxBytes's default.
	DefaultQueryMaxBytes = 256 << 10
	// MaxNesting bounds the parentheses open at once in a query (function
	// calls, grouped expressions, subqueries). Dashboards stay under ten.
	MaxNesting = 100
)

// errQueryTooLarge: the query text passes Config.QueryMaxBytes; it is the
// one too-large sentinel (models.ErrTooLarge, 413) with the query named.
var errQueryTooLarge = fmt.Errorf("query %w", models.ErrTooLarge)

// errTooDeep: the query nests parentheses past MaxNesting (400).
var errTooDeep = errors.New("query nested too deeply")

// limitQueryBody caps a POST /query body before its form is parsed: the
// statement may come percent-encoded (three bytes a character) beside the
// other parameters, which a few KiB hold.
func limitQueryBody(w http.ResponseWriter, r *http.Request, maxBytes int) {
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, 3*int64(maxBytes)+16<<10)
	}
}

// checkQueryText refuses a query longer than maxBytes or nesting
// parentheses deeper than MaxNesting, in one pass over its bytes. Quoted
// strings and identifiers are skipped (a '(' in a tag value is no nesting);
// parentheses in regexes and comments count, which can only refuse a
// pathological query, never let one through.
func checkQueryText(q string, maxBytes int) error {
	if len(q) > maxBytes {
		return fmt.Errorf("%w: %d bytes (at most %d, --query-max-bytes)", errQueryTooLarge, len(q), maxBytes)
	}
	depth := 0
	var quote byte // the open quote, 0 outside strings and identifiers
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0 && c == '\\':
			i++ // an escaped character, even a quote
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			if depth++; depth > MaxNesting {
				return fmt.Errorf("%w: more than %d nested parentheses at byte %d", errTooDeep, MaxNesting, i)
			}
		case c == ')':
			depth = max(depth-1, 0)
		}
	}
	return nil
}
