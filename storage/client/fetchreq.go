package client

import (
	"encoding/json"
	"strconv"
)

// DecodeFetchRequest decodes the JSON body of a batched fetch (the server
// side of Fetch). The body is the same JSON every release sends; what this
// adds is a reader for the exact shape encoding/json writes for a
// FetchRequest (fields in order, no spaces, names and numbers that need no
// escaping), which takes no reflection and one allocation per shard's
// database name: a leader reads one per poll of each of its followers, and
// at 1,000 simulated nodes encoding/json's decoder of these was ~40 % of
// the leaders' fetch work. Any other spelling of the same request (another
// client, spaces, other field order, escapes) is decoded by encoding/json,
// so both read every body alike.
func DecodeFetchRequest(b []byte) (FetchRequest, error) {
	if r, ok := scanFetchRequest(b); ok {
		return r, nil
	}
	var r FetchRequest
	err := json.Unmarshal(b, &r)
	return r, err
}

// scanFetchRequest reads b when it is spelled as json.Marshal spells a
// FetchRequest; false for anything else.
func scanFetchRequest(b []byte) (FetchRequest, bool) {
	s := fetchScan{b: b}
	var r FetchRequest
	var ok bool
	if !s.lit(`{"node":`) {
		return r, false
	}
	if r.Node, ok = s.str(); !ok || !s.lit(`,"wait_ms":`) {
		return r, false
	}
	if r.WaitMS, ok = s.int(); !ok || !s.lit(`,"shards":`) {
		return r, false
	}
	if s.lit("null") {
		return r, s.lit("}") && s.end()
	}
	if !s.lit("[") {
		return r, false
	}
	r.Shards = make([]FetchShard, 0, s.countShards())
	for !s.lit("]") {
		if len(r.Shards) > 0 && !s.lit(",") {
			return r, false
		}
		var f FetchShard
		var n int64
		if !s.lit(`{"db":`) {
			return r, false
		}
		if f.DB, ok = s.str(); !ok || !s.lit(`,"shard":`) {
			return r, false
		}
		if n, ok = s.int(); !ok || !s.lit(`,"term":`) {
			return r, false
		}
		f.Shard = int(n)
		if f.Term, ok = s.int(); !ok || !s.lit(`,"after":`) {
			return r, false
		}
		if f.After, ok = s.uint(); !ok || !s.lit(`,"after_term":`) {
			return r, false
		}
		if f.AfterTerm, ok = s.uint(); !ok || !s.lit("}") {
			return r, false
		}
		r.Shards = append(r.Shards, f)
	}
	return r, s.lit("}") && s.end()
}

// fetchScan is a cursor over a fetch request's bytes.
type fetchScan struct {
	b []byte
	i int
}

func (s *fetchScan) end() bool { return s.i == len(s.b) }

// lit consumes t if the input continues with it.
func (s *fetchScan) lit(t string) bool {
	if len(s.b)-s.i < len(t) || string(s.b[s.i:s.i+len(t)]) != t {
		return false
	}
	s.i += len(t)
	return true
}

// str reads a string of name characters ([A-Za-z0-9_-], what names are
// made of): anything that would need escaping or UTF-8 checks is left to
// encoding/json.
func (s *fetchScan) str() (string, bool) {
	if !s.lit(`"`) {
		return "", false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		c := s.b[s.i]
		switch {
		case c == '"':
			v := string(s.b[start:s.i])
			s.i++
			return v, true
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return "", false
		}
	}
	return "", false
}

// digits reads the digits of a JSON integer without sign, fraction or
// exponent (a leading zero only alone, as JSON has it).
func (s *fetchScan) digits() ([]byte, bool) {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	d := s.b[start:s.i]
	if len(d) == 0 || (d[0] == '0' && len(d) > 1) {
		return nil, false
	}
	if s.i < len(s.b) {
		if c := s.b[s.i]; c == '.' || c == 'e' || c == 'E' {
			return nil, false
		}
	}
	return d, true
}

func (s *fetchScan) int() (int64, bool) {
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	if _, ok := s.digits(); !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return v, err == nil
}

func (s *fetchScan) uint() (uint64, bool) {
	d, ok := s.digits()
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(string(d), 10, 64)
	return v, err == nil
}

// maxShardGuess bounds countShards: a body is up to 4 MiB, and a guess
// from a crafted one must not size a slice of ~700k shards before the
// server's own bound on shards per fetch refuses it.
const maxShardGuess = 1024

// countShards guesses how many shards follow (one per `{"db":`, at most
// maxShardGuess), so that the slice is usually allocated once.
func (s *fetchScan) countShards() int {
	n := 0
	const key = `{"db":`
	for i := s.i; i+len(key) <= len(s.b) && n < maxShardGuess; i++ {
		if s.b[i] == '{' && string(s.b[i:i+len(key)]) == key {
			n++
		}
	}
	return n
}

// EncodeFetchRequest is json.Marshal of r, byte for byte: the client side of
// DecodeFetchRequest's scan. When every name is made of name characters
// (what the scan reads) it is written by hand, without reflection: a
// follower sends one per poll, and at 1,000 simulated nodes encoding/json's
// encoder of these, and the stack it grows in each new session's
// goroutine, was ~5 % of the agents' CPU while a cluster was placed, three
// times as much per database as at 100 nodes. Any other name is left to
// encoding/json.
func EncodeFetchRequest(r FetchRequest) ([]byte, error) {
	if !plainName(r.Node) {
		return json.Marshal(r)
	}
	for i := range r.Shards {
		if !plainName(r.Shards[i].DB) {
			return json.Marshal(r)
		}
	}
	n := 40 + len(r.Node)
	for i := range r.Shards {
		n += 90 + len(r.Shards[i].DB)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"node":"`...)
	b = append(b, r.Node...)
	b = append(b, `","wait_ms":`...)
	b = strconv.AppendInt(b, r.WaitMS, 10)
	b = append(b, `,"shards":`...)
	if r.Shards == nil {
		b = append(b, "null}"...)
		return b, nil
	}
	b = append(b, '[')
	for i, f := range r.Shards {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"db":"`...)
		b = append(b, f.DB...)
		b = append(b, `","shard":`...)
		b = strconv.AppendInt(b, int64(f.Shard), 10)
		b = append(b, `,"term":`...)
		b = strconv.AppendInt(b, f.Term, 10)
		b = append(b, `,"after":`...)
		b = strconv.AppendUint(b, f.After, 10)
		b = append(b, `,"after_term":`...)
		b = strconv.AppendUint(b, f.AfterTerm, 10)
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	return b, nil
}

// plainName: s is made of name characters only ([A-Za-z0-9_-]), which
// JSON writes as they are.
func plainName(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
