package statemachine

import "time"

// PublishNow applies a batch and publishes it as the consumer would, on the
// caller's goroutine (benchmarks of the reducers; the Manager must not be
// started).
func (m *Manager) PublishNow(evs ...Event) { m.publish(evs) }

// RecordRaw records a raw key for the local backup as the consumer would.
func (m *Manager) RecordRaw(src Source, key string, value []byte, rev int64) {
	m.recordRaw(&rawChange{src: src, key: key, value: value, modRev: rev, createRev: rev}, nil)
}

// WriteBackupNow snapshots the raw keys and writes the backup file, as the
// consumer and the backup writer do every BackupWait at most.
func (m *Manager) WriteBackupNow() error {
	return WriteFileAtomic(m.cfg.BackupPath, m.rawSnapshot().file(time.Now()))
}
