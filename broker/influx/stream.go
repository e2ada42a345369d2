package influx

import (
	"context"
	"errors"
	"fmt"
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
func (h *Handler) stream(ctx context.Context, db string, p *query.Plan, w pageSink) error {
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
	w.begin(st.Name, st.Columns, p.Location)
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
		values, done := st.Cut(values)
		if err := w.add(values); err != nil {
			return err // the client went away
		}
		if done {
			break
		}
	}
	return nil
}

// pageSink takes a streamed select's rows page by page.
type pageSink interface {
	// begin comes before the first rows: the series' name and columns,
	// and the zone its times are written in.
	begin(name string, columns []string, loc *time.Location)
	add(values [][]any) error
}

// rowSink collects a streamed select's rows into its one series, for an
// answer that is not chunked: a raw select with LIMIT reads only the
// pages it needs, and holds at most the points a whole answer may.
type rowSink struct {
	row *query.Row
}

func (r *rowSink) begin(name string, columns []string, loc *time.Location) {
	r.row = &query.Row{Name: name, Columns: columns, Loc: loc}
}

func (r *rowSink) add(values [][]any) error {
	if len(r.row.Values)+len(values) > query.DefaultMaxPoints {
		return fmt.Errorf("%w: more than %d points; narrow the time range, the series or lower LIMIT", query.ErrTooLarge, query.DefaultMaxPoints)
	}
	r.row.Values = append(r.row.Values, values...)
	return nil
}

// rows is the answer: its series, or none when it has no rows.
func (r *rowSink) rows() []query.Row {
	if r.row == nil || len(r.row.Values) == 0 {
		return nil
	}
	return []query.Row{*r.row}
}

func (s *seriesStream) begin(name string, columns []string, loc *time.Location) {
	s.head = appendHead(s.head[:0], &query.Row{Name: name, Columns: columns})
	s.loc = loc
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
