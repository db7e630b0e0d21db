package api

import "testing"

func TestPlausibleJobID(t *testing.T) {
	for id, want := range map[string]bool{
		"j-0123456789abcdef":      true,
		"j-0123456789abcdef.0":    true,
		"j-0123456789abcdef.9999": true,
		newJobID():                true,
		newJobID() + ".12":        true,
		"j-5ed":                   false,
		"j-doesnotexist":          false,
		"j-0123456789ABCDEF":      false, // ids are lowercase
		"0123456789abcdef":        false,
		"j-0123456789abcdef.":     false,
		"j-0123456789abcdef.x":    false,
		"j-0123456789abcdef0":     false,
		"j-0123456789abcdef.-1":   false,
		"h-0123456789abcdef":      false,
		"":                        false,
	} {
		if got := plausibleJobID(id); got != want {
			t.Errorf("plausibleJobID(%q) = %v, want %v", id, got, want)
		}
	}
}
