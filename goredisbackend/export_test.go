package goredisbackend

// SentAlone reports how many of b's scripts were sent alone and are not
// answered yet: while one is, the next Eval is combined into a pipeline.
func SentAlone(b *Backend) int {
	b.scripts.mu.Lock()
	defer b.scripts.mu.Unlock()
	return b.scripts.alone
}

// Combines reports whether b combines scripts (not on a cluster client).
func Combines(b *Backend) bool { return b.scripts != nil }
