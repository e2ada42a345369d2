package influx

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/cairn-db/cairn/broker/query"
	"github.com/gin-gonic/gin"
)

// DefaultChunkSize is InfluxDB's rows per chunk when chunked=true names no
// chunk_size.
const DefaultChunkSize = 10_000

// responder writes a /query answer one statement at a time: whole at the
// end (buffered), or as InfluxDB's chunks while statements run (chunked).
type responder interface {
	// statement adds statement id's rows, or its error when errText != "".
	statement(id int, rows []query.Row, errText string)
	// started reports whether any byte of the answer went out: until then
	// a request can still be refused with a status.
	started() bool
	// finish ends the answer.
	finish()
}

// format is how the answer is written.
type format struct {
	unit   int64 // epoch in ns per unit; 0 writes RFC 3339 times
	pretty bool  // indented, as InfluxDB's pretty=true
}

func (f format) write(c *gin.Context, b []byte) error {
	if f.pretty {
		var out bytes.Buffer
		if err := json.Indent(&out, b, "", "    "); err == nil {
			b = out.Bytes()
		}
	}
	_, err := c.Writer.Write(b)
	return err
}

// buffered answers every statement in one JSON object with its length.
type buffered struct {
	c       *gin.Context
	f       format
	results []result
}

func (b *buffered) statement(id int, rows []query.Row, errText string) {
	b.results = append(b.results, result{id: id, rows: rows, err: errText})
}

func (b *buffered) started() bool { return false }

func (b *buffered) finish() {
	chunks := encodeResults(b.results, b.f.unit)
	if b.f.pretty {
		chunks = [][]byte{bytes.Join(chunks, nil)}
	}
	size := 0
	for _, ch := range chunks {
		size += len(ch)
	}
	b.c.Header("Content-Type", "application/json")
	if !b.f.pretty {
		b.c.Header("Content-Length", strconv.Itoa(size))
	}
	b.c.Status(http.StatusOK)
	for _, ch := range chunks {
		if b.f.write(b.c, ch) != nil {
			return // the client went away
		}
	}
}

// chunked streams InfluxDB's chunks, one JSON object a line: each holds at
// most size rows of one series; a series continued in the next chunk is
// "partial", and so is a statement's result until its last chunk.
type chunked struct {
	c    *gin.Context
	f    format
	size int
	sent bool
	buf  []byte
	tt   timeTexts
}

func (ch *chunked) started() bool { return ch.sent }

func (ch *chunked) statement(id int, rows []query.Row, errText string) {
	if errText != "" || len(rows) == 0 {
		r := result{id: id, err: errText}
		ch.emit(appendResults(ch.buf[:0], []result{r}, ch.f.unit))
		return
	}
	for i := range rows {
		n := rows[i].Len()
		for lo := 0; lo < n || lo == 0; lo += ch.size {
			hi := min(lo+ch.size, n)
			last := hi == n
			b := append(ch.buf[:0], `{"results":[{"statement_id":`...)
			b = strconv.AppendInt(b, int64(id), 10)
			b = append(b, `,"series":[`...)
			b = appendRowTimes(b, rowPart(&rows[i], lo, hi), ch.f.unit, &ch.tt)
			if !last {
				b = append(b[:len(b)-1], `,"partial":true}`...)
			}
			b = append(b, ']')
			if !last || i < len(rows)-1 {
				b = append(b, `,"partial":true`...)
			}
			ch.emit(append(b, "}]}\n"...))
			if n == 0 {
				break
			}
		}
	}
}

func (ch *chunked) emit(b []byte) {
	ch.buf = b
	_ = ch.write(b, true) // a client gone shows in the request's context
}

// write sends b, after the status and headers the first time; flush
// pushes it to the client now.
func (ch *chunked) write(b []byte, flush bool) error {
	if !ch.sent {
		ch.c.Header("Content-Type", "application/json")
		ch.c.Status(http.StatusOK)
		ch.sent = true
	}
	if err := ch.f.write(ch.c, b); err != nil {
		return err
	}
	if flush {
		ch.c.Writer.Flush()
	}
	return nil
}

func (ch *chunked) finish() {
	if !ch.sent { // no statement: still an answer
		ch.c.Header("Content-Type", "application/json")
		ch.c.Status(http.StatusOK)
	}
}

// rowPart is rows lo..hi of r, sharing its memory.
func rowPart(r *query.Row, lo, hi int) query.Row {
	p := *r
	if r.Values != nil || r.Times == nil {
		if r.Values != nil {
			p.Values = r.Values[lo:hi]
		}
		return p
	}
	p.Times = r.Times[lo:hi]
	p.Cells = make([][]query.Cell, len(r.Cells))
	for i, col := range r.Cells {
		p.Cells[i] = col[lo:hi]
	}
	return p
}
