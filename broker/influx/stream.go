package influx

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/cairn-db/cairn/broker/query"
)

// PagePoints is Config.PagePoints' default: about how many points a
// streamed raw select reads per page over all shards (query.Pager sizes its
// windows for it); a shard answers at most its share of it, and a window
// where one has more is read again narrower. It bounds the broker's memory
// for the statement, whatever the size of the answer.
const PagePoints = 32 << 10

// flushBytes is how much of an open chunk is held before it goes out: a
// large chunk_size costs the connection's buffer, not the broker's memory.
const flushBytes = 1 << 20

// stream answers a raw select (p.Streamable()) page by page into w: the
// span of its points first, then one time window after another.
func (h *Handler) stream(ctx context.Context, db string, p *query.Plan, w *seriesStream) error {
	if p.DB != "" {
		db = p.DB
	}
	if db == "" {
		return errDBRequired
	}
	cfg, err := h.cfg.Backend.Database(db)
	if err != nil {
		return err
	}
	list, err := h.cfg.Backend.SeriesKeys(ctx, db, p.Req.Measurement)
	if err != nil {
		return err
	}
	series, err := query.ParseSeries(list.Keys)
	if err != nil {
		return err
	}
	st := p.NewStream(series)
	breq := st.BoundsRequest()
	spans, err := h.cfg.Backend.Select(ctx, db, &breq)
	if err != nil {
		return err
	}
	lo, hi, ok := st.Span(spans)
	if !ok {
		return nil
	}
	w.head = appendHead(w.head[:0], &query.Row{Name: st.Name, Columns: st.Columns})
	w.loc = p.Location
	// A shard answers at most its share of a page, or a sixteenth when the
	// database has more shards than that.
	page := h.cfg.PagePoints
	perShard := max(page/max(cfg.NumShards, 1), page/16, 1)
	pg := query.NewPager(lo, hi, p.Desc, page)
	for start, end, more := pg.Next(); more; start, end, more = pg.Next() {
		req := st.PageRequest(start, end, perShard)
		parts, err := h.cfg.Backend.Select(ctx, db, &req)
		if errors.Is(err, query.ErrTooLarge) {
			if err := pg.TooLarge(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		values, n, err := st.Page(parts)
		if err != nil {
			return err
		}
		pg.Done(n)
		if err := w.add(values); err != nil {
			return err // the client went away
		}
	}
	return nil
}

// seriesStream writes one statement's one series as InfluxDB's chunks
// while its pages arrive: a chunk holds at most size rows, and a full one
// is closed when the next row is known (then it is partial, as are the
// statement's result and the series in it) or at the end.
type seriesStream struct {
	ch   *chunked
	id   int
	head []byte // the series up to its values: name and columns
	b    []byte // the open chunk, or what is left of it to write
	rows int    // rows in the open chunk; 0 when none is open
	sent bool   // a chunk of rows went out
	loc  *time.Location
}

func (ch *chunked) series(id int) *seriesStream {
	return &seriesStream{ch: ch, id: id}
}

func (s *seriesStream) add(values [][]any) error {
	for _, v := range values {
		if s.rows == s.ch.size {
			if err := s.close(true); err != nil {
				return err
			}
		}
		if s.rows == 0 {
			s.b = append(s.b, `{"results":[{"statement_id":`...)
			s.b = strconv.AppendInt(s.b, int64(s.id), 10)
			s.b = append(s.b, `,"series":[`...)
			s.b = append(s.b, s.head...)
		} else {
			s.b = append(s.b, ',')
		}
		s.b = appendValues(s.b, v, true, clock{unit: s.ch.f.unit, loc: s.loc})
		s.rows++
		if len(s.b) >= flushBytes {
			if err := s.ch.write(s.b, false); err != nil {
				return err
			}
			s.b = s.b[:0]
		}
	}
	return nil
}

// close ends the open chunk and sends it.
func (s *seriesStream) close(partial bool) error {
	if partial {
		s.b = append(s.b, `],"partial":true}],"partial":true}]}`+"\n"...)
	} else {
		s.b = append(s.b, "]}]}]}\n"...)
	}
	s.rows, s.sent = 0, true
	err := s.ch.write(s.b, true)
	s.b = s.b[:0]
	return err
}

// end ends the statement: its last chunk, or its error after what was
// sent (an answer cut short), or an empty result when there were no rows.
func (s *seriesStream) end(errText string) {
	if s.rows > 0 && s.close(errText != "") != nil {
		return
	}
	if errText != "" || !s.sent {
		s.ch.statement(s.id, nil, errText)
	}
}
