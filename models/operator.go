package models

import "time"

// OpKind says what an operator does to one shard.
type OpKind string

// Operator kinds.
const (
	// OpMove changes a shard's replica set to To: add the new replicas, wait
	// until they are in sync, hand leadership off a leaving replica, remove
	// the old ones, then hand leadership to Leader (when set).
	OpMove OpKind = "move"
	// OpLeader is a graceful leader transfer to Leader (an in-sync replica).
	OpLeader OpKind = "transfer-leader"
	// OpFailover elects Leader at Term because the shard's leader died (or
	// its term is behind a replica's log).
	OpFailover OpKind = "failover"
	// OpOffline takes a shard without a live in-sync replica offline.
	OpOffline OpKind = "offline"
)

// Step is where an operator stands: the next thing the executor does.
type Step string

// Steps, in the order a move runs them.
const (
	StepAdd         Step = "add-replicas"
	StepWaitSync    Step = "wait-in-sync"
	StepLeaveLeader Step = "transfer-leader-off"
	StepRemove      Step = "remove-replicas"
	StepLeader      Step = "transfer-leader"
	StepPublish     Step = "publish" // failover and offline: one write
	StepDone        Step = "done"
	// StepCancel: the operator cannot finish any more (its shard is gone, a
	// target node died); it is dropped and the next plan starts over.
	StepCancel Step = "cancel"
)

// Operator is one decision about one shard, as data: shown by the API,
// persisted under NS/operators/<db>/<shard> while it runs so a new master
// resumes it, and carried out one step per fenced write.
type Operator struct {
	DB    string `json:"db"`
	Shard int    `json:"shard"`
	Kind  OpKind `json:"kind"`
	// From is the replica set when the operator was made; To the target.
	From []string `json:"from,omitempty"`
	To   []string `json:"to,omitempty"`
	// Leader is the leader to end with ("" keeps whoever leads);
	// FromLeader who led when the operator was made.
	Leader     string `json:"leader,omitempty"`
	FromLeader string `json:"from_leader,omitempty"`
	// Unclean: a leader transfer an operator forced to a replica that may
	// not be in sync (or onto an offline shard), accepting lost writes.
	Unclean bool `json:"unclean,omitempty"`
	// Term is the shard term a failover publishes.
	Term int64 `json:"term,omitempty"`
	// Reason says why a shard goes offline.
	Reason string `json:"reason,omitempty"`
	// Step is the next step as of the last write of this operator.
	Step Step `json:"step"`
	// MasterTerm and Created say which master made it, and when.
	MasterTerm int64     `json:"master_term,omitempty"`
	Created    time.Time `json:"created"`
}

// PlanView is the answer of POST /rebalance.
type PlanView struct {
	DryRun bool `json:"dry_run"`
	// InFlight: operators of an earlier plan still run; they are the ones
	// listed, and (unless a dry run) a new plan is made after them.
	InFlight    bool       `json:"in_flight"`
	Relocations int        `json:"relocations"`
	LowerBound  int        `json:"lower_bound"`
	Moves       []MoveView `json:"moves"`
	Operators   []Operator `json:"operators"`
}

// MoveView is one replica or leader change of a plan, flattened from its
// operators: adds, then leader changes, then removes.
type MoveView struct {
	Kind  string `json:"kind"`
	DB    string `json:"db"`
	Shard int    `json:"shard"`
	From  string `json:"from,omitempty"`
	To    string `json:"to,omitempty"`
}

// OperatorList is the answer of GET /api/v1/operators: the operators the
// master persisted, and the keys of records that could not be read.
type OperatorList struct {
	Operators  []Operator `json:"operators"`
	Unreadable []string   `json:"unreadable"`
}
