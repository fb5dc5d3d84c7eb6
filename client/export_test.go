package client

import "time"

// SetLinger sets c's linger past MaxLinger, for tests whose bounds must
// hold far from the linger on busy machines.
func SetLinger(c *Client, d time.Duration) {
	c.linger = d
	if c.coalesce != nil {
		c.coalesce.linger = d
	}
}
