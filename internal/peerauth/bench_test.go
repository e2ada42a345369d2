package peerauth

import (
	"bytes"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkSignAndVerify: the whole cost the secret adds to one replicated
// write: signing a 32 KiB request (about one shard's share of a 5,000-point
// batch) and verifying it, body digest included.
func BenchmarkSignAndVerify(b *testing.B) {
	body := bytes.Repeat([]byte("cpu,host=a value=1 1\n"), 32<<10/21)
	v := NewVerifier(VerifierConfig{Secret: "s3cret", Node: "n1"})
	key := Key("s3cret")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/internal/v1/shards/db/0/write?term=3", bytes.NewReader(body))
		SignRequest(key, req, V3, "n1", body, time.Now())
		if err := v.VerifyRequest(req); err != nil {
			b.Fatal(err)
		}
	}
}
