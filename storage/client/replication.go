package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cairn-db/cairn/models"
	"github.com/cairn-db/cairn/storage/lineproto"
	"github.com/cairn-db/cairn/storage/wire"
)

// Write sends one batch to the shard's leader at term; nil means it is
// durable on the in-sync replicas. A refusal is a *PeerError (models
// .ErrStaleTerm, ErrNotEnoughISR, ...); anything else is a transport error.
func (c *Client) Write(ctx context.Context, s Shard, term int64, points []lineproto.Point) error {
	return c.logEntry(ctx, s, term, wire.Entry{Term: uint64(term), Points: points})
}

// Delete sends a delete to the shard's leader at term, which logs it like a
// write; nil means it is durable on the in-sync replicas. A leader of a
// release before deletes refuses it with 400 (an unknown entry version).
func (c *Client) Delete(ctx context.Context, s Shard, term int64, d *wire.Delete) error {
	return c.logEntry(ctx, s, term, wire.Entry{Term: uint64(term), Delete: d})
}

func (c *Client) logEntry(ctx context.Context, s Shard, term int64, e wire.Entry) error {
	body, err := e.MarshalBinary()
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, s.Peer, http.MethodPost, s.path("write", url.Values{"term": {strconv.FormatInt(term, 10)}}),
		"application/octet-stream", bytes.NewReader(body), http.StatusNoContent)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// LogRequest is a follower's pull of one shard's log from its leader.
type LogRequest struct {
	Term      int64  // the leadership term the follower follows
	Node      string // the follower's node id
	After     uint64 // the follower's last txn id ...
	AfterTerm uint64 // ... and the term of that entry
	Wait      time.Duration
}

// LogAnswer is the leader's answer to a pull: entries to read with Next, or
// one of two instructions.
type LogAnswer struct {
	// Truncate: the follower's log diverged from the leader's; it drops
	// its entries after TruncateTo and pulls again.
	Truncate   bool
	TruncateTo uint64
	// FullSync: the follower is too far behind the leader's log; it
	// replaces its replica with a Snapshot.
	FullSync bool

	body io.ReadCloser
	br   *bufio.Reader
}

// Next returns the next entry of the answer, io.EOF after the last.
func (a *LogAnswer) Next() (wire.Entry, error) {
	var e wire.Entry
	if a.br == nil {
		return e, io.EOF
	}
	data, err := readEntry(a.br)
	if err != nil {
		return e, err
	}
	if err := e.UnmarshalBinary(data); err != nil {
		return e, fmt.Errorf("%w: %w", ErrBadAnswer, err)
	}
	return e, nil
}

// Close releases the answer.
func (a *LogAnswer) Close() error {
	if a.body == nil {
		return nil
	}
	return a.body.Close()
}

// Log pulls the shard's log after the follower's position (GET .../log).
// The caller closes the answer.
func (c *Client) Log(ctx context.Context, s Shard, r LogRequest) (*LogAnswer, error) {
	q := url.Values{}
	q.Set("term", strconv.FormatInt(r.Term, 10))
	q.Set("node", r.Node)
	q.Set("after", strconv.FormatUint(r.After, 10))
	q.Set("after_term", strconv.FormatUint(r.AfterTerm, 10))
	q.Set("wait_ms", strconv.FormatInt(r.Wait.Milliseconds(), 10))
	resp, err := c.do(ctx, s.Peer, http.MethodGet, s.path("log", q), "", nil, http.StatusOK, http.StatusResetContent, http.StatusGone)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusResetContent:
		resp.Body.Close()
		to, err := strconv.ParseUint(resp.Header.Get(HeaderTruncateTo), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: truncate answer of %s: %w", ErrBadAnswer, s, err)
		}
		return &LogAnswer{Truncate: true, TruncateTo: to}, nil
	case http.StatusGone:
		resp.Body.Close()
		return &LogAnswer{FullSync: true}, nil
	}
	return &LogAnswer{body: resp.Body, br: answerReader(resp)}, nil
}

// Snapshot streams the shard's full replica from its leader at term (GET
// .../snapshot), for the engine's Restore. The caller closes it. It names
// the protocol this node speaks: a leader sends no file of a format newer
// than that protocol reads (409).
func (c *Client) Snapshot(ctx context.Context, s Shard, term int64) (io.ReadCloser, error) {
	q := url.Values{"term": {strconv.FormatInt(term, 10)}, "protocol": {strconv.Itoa(models.ProtocolVersion)}}
	resp, err := c.do(ctx, s.Peer, http.MethodGet, s.path("snapshot", q), "", nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// readEntry reads one length-prefixed encoded entry.
func readEntry(br *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, err // io.EOF at a clean end
	}
	if n > maxEntryBytes {
		return nil, fmt.Errorf("%w: entry of %d bytes", ErrBadAnswer, n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(br, buf); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadAnswer, noEOF(err))
	}
	return buf, nil
}

// noEOF: an end of stream inside a record is a broken answer, not its end.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendEntry appends one encoded entry to a log answer (the server side of
// Log and of a batched fetch's records).
func AppendEntry(out, entry []byte) []byte {
	out = binary.AppendUvarint(out, uint64(len(entry)))
	return append(out, entry...)
}

// A follower fetches every shard it follows from one leader node with one
// long-poll (Kafka's fetch sessions): POST /internal/v1/fetch, body
// FetchRequest. The leader answers as soon as any of the shards has
// something for the follower (entries, a truncation, a full sync, an error),
// or after wait_ms with an empty body. The answer is a sequence of records,
// one per shard with something to say, each:
//
//	uvarint index (into the request's shards), uvarint status, uvarint arg,
//	uvarint count, then count x (uvarint length, encoded wire.Entry)
//
// A follower handles truncations, full syncs and errors through the
// per-shard API (Log, Snapshot).

// FetchRequest is the body of a batched fetch.
type FetchRequest struct {
	Node   string       `json:"node"`
	WaitMS int64        `json:"wait_ms"`
	Shards []FetchShard `json:"shards"`
}

// FetchShard is one shard's position in a batched fetch.
type FetchShard struct {
	DB        string `json:"db"`
	Shard     int    `json:"shard"`
	Term      int64  `json:"term"`
	After     uint64 `json:"after"`
	AfterTerm uint64 `json:"after_term"`
}

// FetchStatus says what a batched fetch record carries.
type FetchStatus uint64

// Record statuses of a batched fetch answer.
const (
	FetchEntries  FetchStatus = iota // entries follow
	FetchTruncate                    // Arg: truncate after this txn id
	FetchFullSync                    // the follower needs a snapshot
	FetchError                       // Arg: the HTTP status the per-shard API would answer (409: stale term)
)

// maxFetchRecordEntries bounds a record's entry count as read.
const maxFetchRecordEntries = 1 << 20

// AppendFetchRecord appends one record to a batched fetch answer (the
// server side of Fetch).
func AppendFetchRecord(out []byte, idx int, status FetchStatus, arg uint64, entries [][]byte) []byte {
	out = binary.AppendUvarint(out, uint64(idx))
	out = binary.AppendUvarint(out, uint64(status))
	out = binary.AppendUvarint(out, arg)
	out = binary.AppendUvarint(out, uint64(len(entries)))
	for _, e := range entries {
		out = AppendEntry(out, e)
	}
	return out
}

// FetchRecord is one shard's record in a batched fetch answer; its Count
// entries are read with FetchAnswer.Entry.
type FetchRecord struct {
	Index  int // into the request's Shards
	Status FetchStatus
	Arg    uint64
	Count  int
}

// FetchAnswer reads a batched fetch answer record by record.
type FetchAnswer struct {
	body   io.ReadCloser
	br     *bufio.Reader
	shards int // of the request: a record's index is below it
	left   int // entries of the current record not read yet
}

// ErrBadEntry: one entry of a fetch record did not decode; the answer is
// still readable past it.
var ErrBadEntry = errors.New("storage client: undecodable entry")

// Fetch sends a batched fetch to the leader node p; the caller
// reads the answer's records and closes it. A leader of an older version
// without batched fetches answers ErrUnsupported.
func (c *Client) Fetch(ctx context.Context, p Peer, r FetchRequest) (*FetchAnswer, error) {
	body, err := EncodeFetchRequest(r)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, p, http.MethodPost, "/internal/v1/fetch", "application/json", bytes.NewReader(body), http.StatusOK)
	if err != nil {
		return nil, err
	}
	return &FetchAnswer{body: resp.Body, br: answerReader(resp), shards: len(r.Shards)}, nil
}

// answerReader buffers a streamed answer: 64 KiB, or the answer's length
// when it is known and shorter. Most batched fetch answers are empty (a
// parked poll that timed out) or a few entries, and a 64 KiB buffer for each
// was a quarter of all the memory a 1,000-node `cairn simulate cluster`
// allocated.
func answerReader(resp *http.Response) *bufio.Reader {
	size := 64 << 10
	if n := resp.ContentLength; n >= 0 && n < int64(size) {
		size = max(int(n), 16) // bufio's minimum
	}
	return bufio.NewReaderSize(resp.Body, size)
}

// Next returns the next record, skipping the unread entries of the previous
// one; io.EOF after the last.
func (a *FetchAnswer) Next() (FetchRecord, error) {
	for ; a.left > 0; a.left-- {
		if _, err := readEntry(a.br); err != nil {
			return FetchRecord{}, noEOF(err)
		}
	}
	idx, err := binary.ReadUvarint(a.br)
	if err != nil {
		return FetchRecord{}, err // io.EOF at a clean end
	}
	var hdr [3]uint64
	for i := range hdr {
		if hdr[i], err = binary.ReadUvarint(a.br); err != nil {
			return FetchRecord{}, fmt.Errorf("%w: %w", ErrBadAnswer, noEOF(err))
		}
	}
	if idx >= uint64(a.shards) || hdr[2] > maxFetchRecordEntries {
		return FetchRecord{}, fmt.Errorf("%w: batched fetch record for shard %d of %d with %d entries", ErrBadAnswer, idx, a.shards, hdr[2])
	}
	a.left = int(hdr[2])
	return FetchRecord{Index: int(idx), Status: FetchStatus(hdr[0]), Arg: hdr[1], Count: int(hdr[2])}, nil
}

// Entry returns the next entry of the current record. An entry that does
// not decode is ErrBadEntry and the answer stays readable; any other error
// means the answer is broken.
func (a *FetchAnswer) Entry() (wire.Entry, error) {
	var e wire.Entry
	if a.left == 0 {
		return e, fmt.Errorf("%w: no entry left in the record", ErrBadAnswer)
	}
	data, err := readEntry(a.br)
	if err != nil {
		return e, noEOF(err)
	}
	a.left--
	if err := e.UnmarshalBinary(data); err != nil {
		return e, fmt.Errorf("%w: %w", ErrBadEntry, err)
	}
	return e, nil
}

// Close releases the answer.
func (a *FetchAnswer) Close() error { return a.body.Close() }
