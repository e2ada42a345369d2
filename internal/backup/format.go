// Package backup owns `cairn backup` and `cairn restore`: a consistent logical
// backup of one namespace, taken at a single etcd revision, in a versioned JSON
// file with a checksum, and its restore into an empty namespace (or a node's
// local state backup, so a cluster whose etcd is lost can be rebuilt).
//
// # File format (version 1)
//
// One JSON object, written as a stream so a large namespace never sits in
// memory as one string:
//
//	{"format":"cairn-backup","version":1,"namespace":"/cairn","revision":42,
//	 "taken_at":"2025-01-02T03:04:05Z","external_clusters":["east"],"keys":[
//	{"key":"database/config/db1","value":{"name":"db1",...}},
//	{"key":"some/key","value_b64":"AAEC"}
//	],"key_count":2,"checksum":"sha256:<64 lowercase hex>"}
//
// Keys are relative to the namespace so a backup can be restored under another
// one. A value that is valid JSON (Cairn's records always are) is embedded
// verbatim in "value"; any other byte string goes base64-encoded in
// "value_b64", so there is no wrapper that a real JSON value could be mistaken
// for. A key that is not valid UTF-8 goes in "key_b64" likewise.
//
// The checksum is SHA-256 over every byte of the file before the trailer
// `"checksum":"sha256:<hex>"}` (optionally followed by one newline), which must
// end the file exactly. A flipped byte in the hashed part changes the hash; a
// flipped byte in the trailer breaks its strict shape; a truncated file loses
// the trailer. key_count is checked again after decoding.
package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"unicode/utf8"
)

// Format and Version identify the backup file written by Backup.
const (
	Format  = "cairn-backup"
	Version = 1
)

// checksumField starts the trailer; see the package comment.
const checksumField = `"checksum":"sha256:`

// header is everything written before the keys.
type header struct {
	Format           string   `json:"format"`
	Version          int      `json:"version"`
	Namespace        string   `json:"namespace"`
	Revision         int64    `json:"revision"`
	TakenAt          string   `json:"taken_at"`
	ExternalClusters []string `json:"external_clusters"`
}

// fileDoc is the whole decoded file.
type fileDoc struct {
	header
	Keys     []entry `json:"keys"`
	KeyCount *int    `json:"key_count"`
	Checksum string  `json:"checksum"`
}

// entry is one key of the file. Exactly one of Key/KeyB64 and one of
// Value/ValueB64 is present.
type entry struct {
	Key      *string         `json:"key,omitempty"`
	KeyB64   *string         `json:"key_b64,omitempty"`
	Value    json.RawMessage `json:"value,omitempty"`
	ValueB64 *string         `json:"value_b64,omitempty"`
}

// fileWriter streams a backup file: header, entries, trailer. Every byte up to
// the trailer goes through the hash.
type fileWriter struct {
	w     *countingWriter
	h     hash.Hash
	buf   *bytes.Buffer // one entry at a time, then copied to w and h
	count int
	err   error
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func newFileWriter(w io.Writer, h header) (*fileWriter, error) {
	fw := &fileWriter{w: &countingWriter{w: w}, h: sha256.New(), buf: &bytes.Buffer{}}
	if h.ExternalClusters == nil {
		h.ExternalClusters = []string{} // an explicit [] reads better than null
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	// Reopen the marshalled object to append the keys array to it.
	fw.buf.Write(hb[:len(hb)-1])
	fw.buf.WriteString(`,"keys":[`)
	fw.flush()
	return fw, fw.err
}

func (fw *fileWriter) flush() {
	if fw.err != nil {
		fw.buf.Reset()
		return
	}
	fw.h.Write(fw.buf.Bytes())
	_, fw.err = fw.w.Write(fw.buf.Bytes())
	fw.buf.Reset()
}

// add writes one key (relative to the namespace) and its value.
func (fw *fileWriter) add(key string, value []byte) error {
	b := fw.buf
	if fw.count > 0 {
		b.WriteByte(',')
	}
	b.WriteByte('\n')
	if utf8.ValidString(key) {
		b.WriteString(`{"key":`)
		writeJSONString(b, key)
	} else {
		b.WriteString(`{"key_b64":"`)
		b.WriteString(base64.StdEncoding.EncodeToString([]byte(key)))
		b.WriteByte('"')
	}
	if embeddable(value) {
		b.WriteString(`,"value":`)
		b.Write(value)
	} else {
		b.WriteString(`,"value_b64":"`)
		b.WriteString(base64.StdEncoding.EncodeToString(value))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	fw.count++
	fw.flush()
	return fw.err
}

// finish writes key_count and the checksum trailer and returns the file size.
func (fw *fileWriter) finish() (int64, error) {
	fmt.Fprintf(fw.buf, "\n],\"key_count\":%d,", fw.count)
	fw.flush()
	if fw.err != nil {
		return fw.w.n, fw.err
	}
	sum := hex.EncodeToString(fw.h.Sum(nil))
	_, err := io.WriteString(fw.w, checksumField+sum+"\"}\n")
	return fw.w.n, err
}

func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s) // marshalling a string cannot fail
	b.Write(q)
}

// embeddable reports whether value can be stored verbatim as JSON and read
// back byte for byte: decoding drops whitespace around a value, so a value
// with leading or trailing whitespace goes base64 instead.
func embeddable(v []byte) bool {
	if len(v) == 0 || isSpace(v[0]) || isSpace(v[len(v)-1]) {
		return false
	}
	return json.Valid(v)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// verifyChecksum checks the trailer and the hash of everything before it.
func verifyChecksum(data []byte) error {
	body := bytes.TrimSuffix(data, []byte("\n"))
	i := bytes.LastIndex(body, []byte(checksumField))
	if i < 0 {
		return fmt.Errorf("%w: no checksum trailer (truncated file?)", ErrCorrupt)
	}
	trailer := body[i+len(checksumField):]
	const hexLen = 2 * sha256.Size
	if len(trailer) != hexLen+2 || string(trailer[hexLen:]) != `"}` {
		return fmt.Errorf("%w: malformed checksum trailer (truncated file?)", ErrCorrupt)
	}
	want, err := hex.DecodeString(string(trailer[:hexLen]))
	if err != nil || hex.EncodeToString(want) != string(trailer[:hexLen]) {
		return fmt.Errorf("%w: checksum is not lowercase hex", ErrCorrupt)
	}
	got := sha256.Sum256(body[:i])
	if !bytes.Equal(got[:], want) {
		return fmt.Errorf("%w: checksum mismatch: the file was changed or damaged", ErrCorrupt)
	}
	return nil
}

// sniffFormat reads the "format" member, which both Cairn backup formats
// write first, without decoding the whole file.
func sniffFormat(data []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var toks [3]json.Token
	for i := range toks {
		t, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("%w: not a JSON backup file: %w", ErrCorrupt, err)
		}
		toks[i] = t
	}
	format, ok := toks[2].(string)
	if toks[0] != json.Delim('{') || toks[1] != "format" || !ok {
		return "", fmt.Errorf("%w: not a Cairn backup file (no leading \"format\" member)", ErrCorrupt)
	}
	return format, nil
}

// kvp is one decoded key, absolute, ready to write.
type kvp struct {
	key   string
	value []byte
}

// decodeFile verifies and decodes a Format file, mapping keys under ns.
func decodeFile(data []byte, ns string) (header, []kvp, error) {
	if err := verifyChecksum(data); err != nil {
		return header{}, nil, err
	}
	var doc fileDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return header{}, nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if doc.Format != Format || doc.Version != Version {
		return header{}, nil, fmt.Errorf("%w: unsupported format %q version %d (this cairn reads %q version %d)",
			ErrCorrupt, doc.Format, doc.Version, Format, Version)
	}
	if doc.KeyCount == nil || *doc.KeyCount != len(doc.Keys) {
		return header{}, nil, fmt.Errorf("%w: key_count does not match the %d keys present", ErrCorrupt, len(doc.Keys))
	}
	out := make([]kvp, 0, len(doc.Keys))
	seen := make(map[string]struct{}, len(doc.Keys))
	for i, e := range doc.Keys {
		k, v, err := e.decode()
		if err != nil {
			return header{}, nil, fmt.Errorf("%w: key #%d: %w", ErrCorrupt, i, err)
		}
		if _, dup := seen[k]; dup {
			return header{}, nil, fmt.Errorf("%w: key %q appears twice", ErrCorrupt, k)
		}
		seen[k] = struct{}{}
		out = append(out, kvp{key: ns + "/" + k, value: v})
	}
	return doc.header, out, nil
}

func (e entry) decode() (string, []byte, error) {
	var key string
	switch {
	case e.Key != nil && e.KeyB64 == nil:
		key = *e.Key
	case e.KeyB64 != nil && e.Key == nil:
		b, err := base64.StdEncoding.DecodeString(*e.KeyB64)
		if err != nil {
			return "", nil, fmt.Errorf("key_b64: %v", err)
		}
		key = string(b)
	default:
		return "", nil, fmt.Errorf("needs exactly one of key and key_b64")
	}
	if key == "" {
		return "", nil, fmt.Errorf("empty key")
	}
	switch {
	case e.Value != nil && e.ValueB64 == nil:
		return key, []byte(e.Value), nil
	case e.ValueB64 != nil && e.Value == nil:
		v, err := base64.StdEncoding.DecodeString(*e.ValueB64)
		if err != nil {
			return "", nil, fmt.Errorf("key %q: value_b64: %v", key, err)
		}
		return key, v, nil
	}
	return "", nil, fmt.Errorf("key %q needs exactly one of value and value_b64", key)
}
