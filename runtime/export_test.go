package runtime

// LaneStarted is how many tasks w's lane (lane.go) started.
func LaneStarted(w *Worker) int64 { return w.poller.lane.started.Load() }
