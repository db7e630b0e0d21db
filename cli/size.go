package cli

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a byte size: "1048576", "64MiB", "64MB", "16M", "1GiB",
// "512k". Decimal (KB/MB/GB) and binary (KiB/MiB/GiB, K/M/G) units.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("%q is not a size; use e.g. 64MiB, 512KiB or a byte count", s)
	}
	mult := map[string]float64{"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("unknown size unit %q in %q; use B, KiB, MiB, GiB (or KB, MB, GB)", unit, s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %w", s, err)
	}
	v := f * mult
	if v <= 0 || v > 1<<62 {
		return 0, fmt.Errorf("size %q is out of range", s)
	}
	return uint64(v), nil
}

// sizeText renders a byte count in the largest binary unit that keeps it
// at least 1: "512 B", "3.2 MiB", "41.0 GiB".
func sizeText(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
