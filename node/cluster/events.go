package cluster

// Changes returns a channel that receives a value whenever membership
// changes: a member joins, dies, leaves or changes its meta, a voter is
// promoted or removed, or leadership moves. Bursts are coalesced into one
// value, so a consumer (the scheduler) re-plans once per burst. Each call
// subscribes a new channel; all are closed by Close.
func (c *Cluster) Changes() <-chan struct{} {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		close(ch)
		return ch
	}
	c.subs = append(c.subs, ch)
	return ch
}

// notify wakes every subscriber without blocking.
func (c *Cluster) notify() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.subs {
		select {
		case s <- struct{}{}:
		default:
		}
	}
}

// kickHousekeeping asks the housekeeping loop to run now rather than at its
// next tick.
func (c *Cluster) kickHousekeeping() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}
