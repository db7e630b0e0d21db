package cluster

import (
	"testing"
	"time"
)

// A node remembers the elections of the last hour: older ones are
// dropped as new ones come and not counted, and the latest is when the
// current leader began.
func TestElectionsOfTheLastHour(t *testing.T) {
	c := &Cluster{}
	t0 := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	for _, d := range []time.Duration{0, 10 * time.Minute, 50 * time.Minute, 61 * time.Minute, 62 * time.Minute} {
		c.sawElection(t0.Add(d))
	}
	if len(c.elected) != 4 {
		t.Fatalf("kept %d elections, want the 4 of the hour before the last: %v", len(c.elected), c.elected)
	}
	now := t0.Add(70 * time.Minute)
	if n := within(c.elected, now); n != 3 {
		t.Fatalf("%d elections within the hour before %v, want 3", n, now)
	}
	if got := last(c.elected); !got.Equal(t0.Add(62 * time.Minute)) {
		t.Fatalf("last election %v", got)
	}
	if !last(nil).IsZero() || within(nil, now) != 0 {
		t.Fatal("no elections: want zero time and count")
	}
}
