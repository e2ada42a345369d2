package models

// The console's history (GET /api/v1/history and /internal/v1/history): the
// rings of recent samples that internal/history keeps and gathers, and web
// serves.

// HistorySeries is one node's ring in columns, as the charts draw it: Time
// in unix seconds, and one column per series name with null where a value is
// unknown (first sample, no traffic for a latency, a role the node does not
// have).
type HistorySeries struct {
	NodeID    string                `json:"node_id"`
	IntervalS float64               `json:"interval_s"`
	Time      []int64               `json:"time"`
	Values    map[string][]*float64 `json:"series"`
}

// HistoryNode is one node's ring in a cluster answer; Error names why a
// peer's ring is missing.
type HistoryNode struct {
	HistorySeries
	Address string `json:"address,omitempty"`
	Error   string `json:"error,omitempty"`
}

// HistoryCluster is GET /api/v1/history's answer: every live node's ring.
type HistoryCluster struct {
	Series    []string      `json:"series"` // the series names, in chart order
	Nodes     []HistoryNode `json:"nodes"`
	Truncated bool          `json:"truncated,omitempty"` // more live nodes than the fan-out's bound
}
