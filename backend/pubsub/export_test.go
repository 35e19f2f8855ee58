package pubsub

// PendingSubscribes returns how many Subscribe calls wait for the next
// SUBSCRIBE, for the tests.
func PendingSubscribes(h *Hub) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending)
}
