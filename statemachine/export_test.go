package statemachine

// PublishNow applies a batch and publishes it as the consumer would, on the
// caller's goroutine (benchmarks of the reducers; the Manager must not be
// started).
func (m *Manager) PublishNow(evs ...Event) { m.publish(evs) }
