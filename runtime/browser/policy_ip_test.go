package browser

import "testing"

func TestIPEntryIsNotASuffix(t *testing.T) {
	p := &policy{hosts: []string{"10.1.2.3", "example.com"}}
	for host, want := range map[string]bool{"10.1.2.3": true, "x.10.1.2.3": false, "api.example.com": true, "badexample.com": false} {
		if got := p.hostAllowed(host); got != want {
			t.Errorf("hostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
}
