package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-db/cairn/coordinator/kv"
	"github.com/stretchr/testify/require"
)

func TestMemoryRoundTripAndFileShape(t *testing.T) {
	src := kv.NewMemoryStore()
	want := seed(t, src, "/cairn")
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var progress bytes.Buffer
	data := backupBytes(t, Options{Store: src, Namespace: "/cairn/", PageSize: 4, Progress: &progress,
		Now: func() time.Time { return at }})

	var doc map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data, &doc))
	require.JSONEq(t, `"cairn-backup"`, string(doc["format"]))
	require.JSONEq(t, `1`, string(doc["version"]))
	require.JSONEq(t, `"/cairn"`, string(doc["namespace"]))
	require.JSONEq(t, `"2025-01-02T03:04:05Z"`, string(doc["taken_at"]))
	require.JSONEq(t, `["east"]`, string(doc["external_clusters"]))
	require.Contains(t, progress.String(), `"east"`)
	require.True(t, bytes.HasSuffix(data, []byte("\"}\n")))
	// Records are embedded as JSON, not as escaped strings.
	require.Contains(t, string(data), `{"key":"drain/n3","value":{"node_id":"n3","since":1700000000000}}`)

	dst := kv.NewMemoryStore()
	s, err := Restore(context.Background(), Options{Store: dst, Namespace: "/cairn"}, bytes.NewReader(data), false)
	require.NoError(t, err)
	require.Equal(t, len(want), s.Keys)
	require.Equal(t, int64(len(data)), s.Bytes)
	requireSame(t, want, dump(t, dst, "/cairn"))
}

func TestRestoreUnderAnotherNamespace(t *testing.T) {
	src := kv.NewMemoryStore()
	want := seed(t, src, "/cairn")
	data := backupBytes(t, Options{Store: src, Namespace: "/cairn"})

	// The same store: the source namespace must stay as it was.
	before, _, err := src.List(context.Background(), "/cairn/")
	require.NoError(t, err)
	_, err = Restore(context.Background(), Options{Store: src, Namespace: "/staging/c1"}, bytes.NewReader(data), false)
	require.NoError(t, err)
	requireSame(t, want, dump(t, src, "/staging/c1"))
	after, _, err := src.List(context.Background(), "/cairn/")
	require.NoError(t, err)
	require.Equal(t, before, after)
}

func TestEveryFlippedByteAndTruncationIsRefused(t *testing.T) {
	src := kv.NewMemoryStore()
	seed(t, src, "/cairn")
	data := backupBytes(t, Options{Store: src, Namespace: "/cairn"})
	dst := kv.NewMemoryStore()
	o := Options{Store: dst, Namespace: "/cairn"}
	restore := func(b []byte) error {
		_, err := Restore(context.Background(), o, bytes.NewReader(b), false)
		return err
	}

	for i := range data {
		flipped := bytes.Clone(data)
		flipped[i] ^= 0x01
		require.ErrorIs(t, restore(flipped), ErrCorrupt, "byte %d flipped", i)
	}
	// Cutting only the final newline leaves a complete file; any deeper cut
	// loses data or the trailer.
	for n := range len(data) - 1 {
		require.ErrorIs(t, restore(data[:n]), ErrCorrupt, "cut at %d of %d", n, len(data))
	}
	// Nothing was written by any of the refused restores.
	kvs, _, err := dst.List(context.Background(), "")
	require.NoError(t, err)
	require.Empty(t, kvs)
	require.NoError(t, restore(data[:len(data)-1]))
}

func TestChecksummedButInvalidFilesAreRefused(t *testing.T) {
	src := kv.NewMemoryStore()
	_, err := src.Put(context.Background(), "/cairn/a", []byte(`{"x":1}`), 0)
	require.NoError(t, err)
	data := string(backupBytes(t, Options{Store: src, Namespace: "/cairn"}))
	entry := `{"key":"a","value":{"x":1}}`
	require.Contains(t, data, entry)

	cases := map[string]string{
		"future version":    strings.Replace(data, `"version":1`, `"version":2`, 1),
		"other format":      strings.Replace(data, `"format":"cairn-backup"`, `"format":"lindb-backup"`, 1),
		"key count":         strings.Replace(data, `"key_count":1`, `"key_count":2`, 1),
		"no key count":      strings.Replace(data, `"key_count":1,`, ``, 1),
		"duplicate key":     strings.Replace(data, entry, entry+","+entry, 1),
		"both values":       strings.Replace(data, entry, `{"key":"a","value":1,"value_b64":"AA=="}`, 1),
		"no value":          strings.Replace(data, entry, `{"key":"a"}`, 1),
		"empty key":         strings.Replace(data, entry, `{"key":"","value":1}`, 1),
		"bad base64":        strings.Replace(data, entry, `{"key":"a","value_b64":"!!"}`, 1),
		"not an object":     strings.Replace(data, `{"format"`, `[{"format"`, 1),
		"format not first":  strings.Replace(data, `{"format":"cairn-backup",`, `{"x":1,"format":"cairn-backup",`, 1),
		"extra after close": data[:len(data)-1] + `x` + "\n",
	}
	for name, edited := range cases {
		t.Run(name, func(t *testing.T) {
			dst := kv.NewMemoryStore()
			b := resign(t, []byte(edited))
			if name == "extra after close" {
				b = []byte(edited)
			}
			_, err := Restore(context.Background(), Options{Store: dst, Namespace: "/cairn"}, bytes.NewReader(b), false)
			require.ErrorIs(t, err, ErrCorrupt)
			kvs, _, err := dst.List(context.Background(), "")
			require.NoError(t, err)
			require.Empty(t, kvs)
		})
	}
}

func TestOddKeysAndValuesSurvive(t *testing.T) {
	src := kv.NewMemoryStore()
	ctx := context.Background()
	odd := map[string][]byte{
		"bin\xff\xfekey":  []byte(`{"ok":true}`),
		"quote\"and\\":    []byte("\xff\xfe"),
		"pretty":          []byte("{\n  \"a\": [1, 2]\n}"),
		"string":          []byte(`"just a string"`),
		"number":          []byte(`12.5e3`),
		"html<&>":         []byte(`{"h":"<b>&"}`),
		"trailing-ws":     []byte("{}\n"),
		"b64-lookalike":   []byte(`{"b64":"AAAA"}`),
		"value_b64-alike": []byte(`{"value_b64":"AAAA"}`),
	}
	for k, v := range odd {
		_, err := src.Put(ctx, "/ns/"+k, v, 0)
		require.NoError(t, err)
	}
	data := backupBytes(t, Options{Store: src, Namespace: "/ns"})
	dst := kv.NewMemoryStore()
	_, err := Restore(ctx, Options{Store: dst, Namespace: "/ns"}, bytes.NewReader(data), false)
	require.NoError(t, err)
	requireSame(t, odd, dump(t, dst, "/ns"))
}

func TestBadOptions(t *testing.T) {
	_, err := Backup(context.Background(), Options{Namespace: "/cairn"}, &bytes.Buffer{})
	require.ErrorIs(t, err, ErrBadOptions)
	_, err = Restore(context.Background(), Options{Store: kv.NewMemoryStore(), Namespace: "/"},
		strings.NewReader("{}"), false)
	require.ErrorIs(t, err, ErrBadOptions)
}

// FuzzRestoreNeverPanics feeds arbitrary bytes to the decoder: anything that is
// not a valid backup must come back as ErrCorrupt (or be a valid one).
func FuzzRestoreNeverPanics(f *testing.F) {
	src := kv.NewMemoryStore()
	_, err := src.Put(context.Background(), "/cairn/a", []byte(`{"x":1}`), 0)
	require.NoError(f, err)
	var buf bytes.Buffer
	_, err = Backup(context.Background(), Options{Store: src, Namespace: "/cairn"}, &buf)
	require.NoError(f, err)
	f.Add(buf.Bytes())
	f.Add([]byte(`{"format":"cairn-state-backup","version":1,"sources":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := decode(data, Options{Namespace: "/cairn", Progress: &bytes.Buffer{}})
		if err != nil {
			require.True(t, errorsIsAny(err, ErrCorrupt, ErrOutsideNamespace), "unexpected error %v", err)
		}
	})
}

func TestLargeNamespaceReportsProgress(t *testing.T) {
	ctx := context.Background()
	src := kv.NewMemoryStore()
	o := Options{Store: src, Namespace: "/cairn"}
	require.NoError(t, o.validate())
	kvs := make([]kvp, progressEvery+5)
	for i := range kvs {
		kvs[i] = kvp{key: fmt.Sprintf("/cairn/database/config/db%06d", i), value: []byte(`{}`)}
	}
	_, err := writeAll(ctx, o, kvs)
	require.NoError(t, err)

	var progress bytes.Buffer
	var buf bytes.Buffer
	s, err := Backup(ctx, Options{Store: src, Namespace: "/cairn", Progress: &progress}, &buf)
	require.NoError(t, err)
	require.Equal(t, len(kvs), s.Keys)
	require.Contains(t, progress.String(), fmt.Sprintf("backup: %d keys written", progressEvery))

	progress.Reset()
	dst := kv.NewMemoryStore()
	_, err = Restore(ctx, Options{Store: dst, Namespace: "/cairn", Progress: &progress}, &buf, false)
	require.NoError(t, err)
	require.Contains(t, progress.String(), fmt.Sprintf("restore: %d of %d keys written", progressEvery, len(kvs)))
	got, _, err := dst.List(ctx, "/cairn/")
	require.NoError(t, err)
	require.Len(t, got, len(kvs))
}
