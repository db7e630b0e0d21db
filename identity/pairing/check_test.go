package pairing

import (
	"errors"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/identity"
)

const t0 = int64(1_760_000_000_000) // an arbitrary "now" in Unix ms

func TestCheck(t *testing.T) {
	c := mustNew(t, identity.KindNode, testFP)
	rec, err := c.Record("device:d-00000001", t0, 10*time.Minute)
	if err != nil {
		t.Fatalf("Record: %v", err)
	}
	if rec.ID != c.IDString() || rec.Kind != "node" || rec.ExpiresAtMS != t0+600_000 || rec.CreatedBy != "device:d-00000001" {
		t.Fatalf("Record = %+v", rec)
	}
	wrong := c.Secret()
	wrong[7] ^= 0x01

	tests := []struct {
		name   string
		secret []byte
		now    int64
		want   error
		parts  []string
	}{
		{"ok at creation", c.Secret(), t0, nil, nil},
		{"ok a millisecond before expiry", c.Secret(), rec.ExpiresAtMS - 1, nil, nil},
		{"expired at the deadline", c.Secret(), rec.ExpiresAtMS, ErrExpired, []string{"expired 0s ago"}},
		{"expired 3m ago", c.Secret(), rec.ExpiresAtMS + 3*60_000 + 59_999, ErrExpired,
			[]string{"pairing code expired 3m ago; create a new one with 'palyra pair create'"}},
		{"one bit off", wrong, t0, ErrWrongSecret, []string{rec.ID, "check the code"}},
		{"empty", nil, t0, ErrWrongSecret, nil},
		{"too long", append(c.Secret(), 0), t0, ErrWrongSecret, nil},
		{"the hash itself", c.SecretHash(), t0, ErrWrongSecret, nil},
		// The secret is checked before expiry, so a guesser learns nothing.
		{"wrong and expired", wrong, rec.ExpiresAtMS + 1, ErrWrongSecret, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(rec, tt.secret, tt.now)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Check: err = %v, want %v", err, tt.want)
			}
			wantErr(t, err, tt.parts...)
		})
	}
}

func TestCheckBadRecord(t *testing.T) {
	c := mustNew(t, identity.KindDevice, testFP)
	rec, err := c.Record("node:n-1", t0, 0)
	if err != nil {
		t.Fatal(err)
	}
	short := rec
	short.SecretHash = rec.SecretHash[:16]
	if err := Check(short, c.Secret(), t0); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("short hash: err = %v, want ErrBadRecord", err)
	}
	if err := Check(Record{ID: "X"}, nil, t0); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("empty record: err = %v, want ErrBadRecord", err)
	}
	odd := rec
	odd.Kind = "robot"
	if err := Check(odd, c.Secret(), t0); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("unknown kind: err = %v, want ErrBadRecord", err)
	}
}

func TestRecordTTL(t *testing.T) {
	c := mustNew(t, identity.KindNode, testFP)
	rec, err := c.Record("x", t0, 0)
	if err != nil || rec.ExpiresAtMS != t0+DefaultTTL.Milliseconds() {
		t.Fatalf("Record(ttl 0) = %+v, %v; want the default TTL", rec, err)
	}
	for _, ttl := range []time.Duration{MinTTL, MaxTTL} {
		if _, err := c.Record("x", t0, ttl); err != nil {
			t.Errorf("Record(ttl %s): %v", ttl, err)
		}
	}
	for _, ttl := range []time.Duration{-time.Minute, MinTTL - time.Millisecond, MaxTTL + time.Second} {
		_, err := c.Record("x", t0, ttl)
		if !errors.Is(err, ErrBadRecord) {
			t.Errorf("Record(ttl %s): err = %v, want ErrBadRecord", ttl, err)
		}
		wantErr(t, err, "--ttl between 30s and 24h0m0s")
	}
	if _, err := (Code{}).Record("x", t0, 0); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("zero Code: err = %v, want ErrBadRecord", err)
	}
}

func TestAgo(t *testing.T) {
	for ms, want := range map[int64]string{
		0: "0s", 59_999: "59s", 60_000: "1m", 3_599_999: "59m", 3_600_000: "1h",
		3_900_000: "1h5m", 47*3_600_000 + 59*60_000: "47h59m", 48 * 3_600_000: "2d", -1: "long",
	} {
		if got := ago(ms); got != want {
			t.Errorf("ago(%d) = %q, want %q", ms, got, want)
		}
	}
}
