package taskling

// StopHeartbeatForTest stops the execution's heartbeat as if its process froze, leaving its slot
// held, so tests can watch the slot being reclaimed.
func (e *Execution) StopHeartbeatForTest() {
	e.stopHeartbeat()
	<-e.heartbeatDone
}
