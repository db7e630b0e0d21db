package palyrav1

import (
	"strconv"
	"time"
)

// FormatRetention writes a duration in milliseconds the way people say a
// retention: "7d", "3d12h", "36h", "1h30m", "45s". Node messages and the
// CLI both use it, so a retention reads the same everywhere.
func FormatRetention(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d <= 0 || d%time.Second != 0 {
		return d.String()
	}
	out := ""
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if u.name == "d" && d < 48*time.Hour {
			continue // "24h", "36h" read better than "1d", "1d12h"
		}
		if n := d / u.d; n > 0 {
			out += strconv.FormatInt(int64(n), 10) + u.name
			d -= n * u.d
		}
	}
	return out
}
