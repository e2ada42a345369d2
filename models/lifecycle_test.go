package models

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"": 0, "0": 0, "INF": 0, "30d": 30 * Day, "2w": 14 * Day, "1d12h": 36 * time.Hour,
		"90m": 90 * time.Minute, "2h0m0s": 2 * time.Hour, "45s": 45 * time.Second,
	} {
		got, err := ParseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got.D(), in)
		back, err := ParseDuration(got.String())
		require.NoError(t, err)
		require.Equal(t, got, back, "%s round-trips as %s", in, got)
	}
	for _, in := range []string{"d", "5", "5x", "1.5h", "-1h", "1h-", "99999999999999999999d", "36500000d"} {
		_, err := ParseDuration(in)
		require.Error(t, err, in)
	}
	require.Equal(t, "1d12h", Duration(36*time.Hour).String())
	require.Equal(t, "1m30s", Duration(90*time.Second).String())

	var d struct {
		R Duration `json:"r,omitempty"`
	}
	require.NoError(t, json.Unmarshal([]byte(`{"r":"30d"}`), &d))
	require.Equal(t, 30*Day, d.R.D())
	out, err := json.Marshal(d)
	require.NoError(t, err)
	require.JSONEq(t, `{"r":"30d"}`, string(out))
	require.Error(t, json.Unmarshal([]byte(`{"r":30}`), &d), "a number is ambiguous")
	d.R = 0
	out, _ = json.Marshal(d)
	require.JSONEq(t, `{}`, string(out))
}

func TestLifecycleLimits(t *testing.T) {
	h := Duration(time.Hour)
	for _, c := range []struct {
		db        Database
		partition time.Duration
		ahead     time.Duration
		behead    time.Duration
	}{
		{Database{}, 7 * Day, Day, 0},
		{Database{Retention: 2 * h}, time.Hour, Day, 2 * time.Hour},
		{Database{Retention: 30 * 24 * h, Behead: 24 * h, Ahead: h}, Day, time.Hour, Day},
		{Database{Retention: 400 * 24 * h, Partition: 24 * h}, Day, Day, 400 * Day},
		{Database{Behead: 3 * h}, 7 * Day, Day, 3 * time.Hour},
	} {
		require.Equal(t, c.partition, c.db.PartitionLength(), "%+v", c.db)
		require.Equal(t, c.ahead, c.db.AheadLimit(), "%+v", c.db)
		require.Equal(t, c.behead, c.db.BeheadLimit(), "%+v", c.db)
	}
}
