package policy

import (
	"bytes"
	"testing"
)

// FuzzParse: Parse never panics, and what it accepts it accepts again and can
// authorise with.
func FuzzParse(f *testing.F) {
	f.Add(DefaultPolicy())
	f.Add([]byte(forbidBad))
	f.Add([]byte(`permit (principal, action == Palyra::Action::"job.sumbit", resource);`))
	f.Add([]byte(`permit (principal, action, resource) when { resource.submiter == principal.ref };`))
	f.Add([]byte(`@id("x") permit (principal is Palyra::Node, action in [Palyra::Action::"node_work"], resource)
when { principal.hasTag("z") && principal.getTag("z") like "e*" && context has grant_host };`))
	f.Add([]byte(`forbid (principal, action, resource) when { if context has job_kind then context.job_kind == "a" else 1 > 2 + 3 };`))
	f.Add([]byte("permit (principal, action, resource"))
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := Parse(src)
		if err != nil {
			if s != nil {
				t.Fatal("Parse returned a set and an error")
			}
			return
		}
		if len(s.IDs()) == 0 || !bytes.Equal(s.Source(), src) {
			t.Fatalf("accepted set has ids %v and source %q", s.IDs(), s.Source())
		}
		if _, err := Parse(s.Source()); err != nil {
			t.Fatalf("accepted source rejected on re-parse: %v", err)
		}
		d := NewEngine(s).Authorize(Request{Principal: plainDevice, Action: ActionJobCancel, Resource: JobResource("j-1", plainDevice.String(), "wasm")})
		_ = Explain(d)
	})
}
