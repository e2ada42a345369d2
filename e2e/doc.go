// Package e2e holds Cairn's multi-process end-to-end tests: they build the
// cairn binary once, start real processes on free loopback ports, and check
// the contract an operator relies on (start, election, etcd outages, exit
// codes) by killing, stopping and restarting those processes.
package e2e
