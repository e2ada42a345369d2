package models_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/cairn-db/cairn/models"
	"github.com/stretchr/testify/require"
)

// TestCodesRoundTrip: every sentinel answers with its own status and code,
// and a client decoding the envelope gets the same sentinel back with the
// message unchanged.
func TestCodesRoundTrip(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range models.Codes {
		require.False(t, seen[c.Code], "code %q twice", c.Code)
		seen[c.Code] = true
		err := fmt.Errorf("%w: database %q", c.Err, "x")
		status, body := models.Envelope(err)
		require.Equal(t, c.Status, status, c.Code)
		require.Equal(t, c.Code, body.Error.Code)
		data, jerr := json.Marshal(body)
		require.NoError(t, jerr)
		back := models.DecodeError(data)
		require.ErrorIs(t, back, c.Err, c.Code)
		require.Equal(t, err.Error(), back.Error())
	}
}

func TestStatusOf(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		status int
		code   string
	}{
		{"nil", nil, http.StatusOK, ""},
		{"unknown", errors.New("boom"), http.StatusInternalServerError, "internal"},
		{"api sentinel wins over an internal one", fmt.Errorf("%w: %w", models.ErrUnavailable, models.ErrStaleTerm), http.StatusServiceUnavailable, "unavailable"},
		{"outcome unknown before unavailable", fmt.Errorf("%w: %w", models.ErrUnavailable, models.ErrOutcomeUnknown), http.StatusServiceUnavailable, "outcome_unknown"},
		{"marked keeps its message and answers with the mark", models.Mark(errors.New("etcd full"), models.ErrNoSpace), http.StatusServiceUnavailable, "etcd_nospace"},
		{"not enough in-sync replicas", fmt.Errorf("storage: %w", models.ErrNotEnoughISR), http.StatusServiceUnavailable, "not_enough_isr"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, code := models.StatusOf(c.err)
			require.Equal(t, c.status, status)
			require.Equal(t, c.code, code)
		})
	}
}

// TestDecodeErrorUnknown: an answer this binary cannot read (another
// version's code, no envelope) is ErrUnavailable, with a bounded message.
func TestDecodeErrorUnknown(t *testing.T) {
	err := models.DecodeError([]byte(`{"error":{"code":"from_the_future","message":"m"}}`))
	require.ErrorIs(t, err, models.ErrUnavailable)
	require.Equal(t, "m", err.Error())
	long := make([]byte, 1<<20)
	for i := range long {
		long[i] = 'x'
	}
	err = models.DecodeError(long)
	require.ErrorIs(t, err, models.ErrUnavailable)
	require.Len(t, err.Error(), 1024)
}

func TestMark(t *testing.T) {
	base := errors.New("lower layer")
	m := models.Mark(base, models.ErrConflict)
	require.ErrorIs(t, m, base)
	require.ErrorIs(t, m, models.ErrConflict)
	require.Equal(t, "lower layer", m.Error())
	require.NoError(t, models.Mark(nil, models.ErrConflict))
	already := fmt.Errorf("%w: x", models.ErrConflict)
	require.Same(t, already, models.Mark(already, models.ErrConflict))
}

// TestPartialWriteCrossesTheWire: a shard leader's partial write (points
// refused for their field's type, the others stored) reaches the broker
// that sent them as a *models.PartialWriteError with its reason and count, so the
// broker adds them to its own.
func TestPartialWriteCrossesTheWire(t *testing.T) {
	sent := fmt.Errorf("shard 3: %w", &models.PartialWriteError{Reason: `field type conflict: input field "x" on measurement "m" is type integer, already exists as type float`, Dropped: 2})
	status, body := models.Envelope(sent)
	require.Equal(t, http.StatusBadRequest, status)
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	got := models.DecodeError(raw)
	var pw *models.PartialWriteError
	require.True(t, errors.As(got, &pw), "%v", got)
	require.Equal(t, 2, pw.Dropped)
	require.ErrorIs(t, got, models.ErrBadInput)
	require.Equal(t, `partial write: field type conflict: input field "x" on measurement "m" is type integer, already exists as type float dropped=2`, got.Error())

	// Any other refusal stays what it was.
	_, body = models.Envelope(fmt.Errorf("%w: nope", models.ErrBadInput))
	raw, _ = json.Marshal(body)
	require.False(t, errors.As(models.DecodeError(raw), &pw))
	require.NotContains(t, string(raw), "partial")
}
