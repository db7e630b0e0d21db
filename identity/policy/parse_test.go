package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseRejects(t *testing.T) {
	cases := []struct {
		name      string
		src       string
		line, col int
		msg, fix  string
	}{
		{"missing semicolon", "permit (principal, action, resource)",
			1, 37, `expected ";", found end of input`, `end every policy with ";"`},
		{"= for ==", "// c\npermit (principal, action = Palyra::Action::\"job.submit\", resource);",
			2, 29, `found "="`, `"=="`},
		{"empty condition", "permit (principal, action, resource) when { };",
			1, 46, "expected an expression", "complete the expression"},
		{"unknown action", "permit (principal, action, resource);\n\n@id(\"typo\")\npermit (principal, action == Palyra::Action::\"job.sumbit\", resource);",
			4, 46, `unknown action "job.sumbit"`, `did you mean Palyra::Action::"job.submit"?`},
		{"unknown attribute", "permit (principal, action == Palyra::Action::\"job.cancel\", resource)\nwhen { resource.submiter == principal.ref };",
			2, 17, `Palyra::Job has no attribute "submiter"`, `did you mean "submitter"?`},
		{"attribute of another type", "permit (principal, action, resource) when { resource.kind == \"wasm\" };",
			1, 54, `has no attribute "kind"`, "resource is Palyra::Job"},
		{"labels are tags", "permit (principal, action, resource) when { principal.labels.zone == \"eu\" };",
			1, 55, `has no attribute "labels"`, `principal.hasTag("zone")`},
		{"unknown entity type", "permit (principal is Palyra::Devise, action, resource);",
			1, 22, "unknown entity type Palyra::Devise", "did you mean Palyra::Device?"},
		{"unknown has", "forbid (principal, action, resource) when { context has grant_hots };",
			1, 57, `attribute "grant_hots"`, `did you mean "grant_host"?`},
		{"unknown context key", "permit (principal, action, resource) when { context has job_kind && context.jobkind == \"x\" };",
			1, 77, `context has no key "jobkind"`, `did you mean "job_kind"?`},
		{"unguarded context", "permit (principal, action, resource) when { context.grant_host == \"x\" };",
			1, 53, "context.grant_host may be absent", "context has grant_host"},
		{"unguarded tag", "permit (principal, action, resource) when { principal.getTag(\"zone\") == \"eu\" };",
			1, 55, `tag "zone" may be absent`, `principal.hasTag("zone")`},
		{"action does not apply", "permit (principal, action == Palyra::Action::\"job.read\", resource is Palyra::Grant);",
			1, 20, "no action in this policy's scope applies", "job.read"},
		{"type error", "permit (principal, action, resource) when { principal.operator == \"yes\" };",
			1, 1, "not compatible", "types"},
		{"duplicate id", "@id(\"a\") permit (principal, action, resource);\n@id(\"a\") forbid (principal, action, resource);",
			2, 1, `"a" is already used by the policy at line 1`, "own @id"},
		{"bad id", "@id(\"a b\") permit (principal, action, resource);",
			1, 1, "not a usable policy id", "letters"},
		{"empty", "// nothing\n", 0, 0, "no policies", "default policy"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse([]byte(c.src))
			if err == nil {
				t.Fatalf("Parse accepted %q with ids %v", c.src, s.IDs())
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("error %v does not wrap ErrInvalidPolicy", err)
			}
			if c.line == 0 {
				if !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), c.fix) {
					t.Errorf("error %q lacks %q or %q", err, c.msg, c.fix)
				}
				return
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not an *Error", err)
			}
			if pe.Line != c.line || pe.Col != c.col || !strings.Contains(pe.Msg, c.msg) || !strings.Contains(pe.Fix, c.fix) {
				t.Errorf("got  %v\nwant line %d:%d, msg containing %q, fix containing %q", pe, c.line, c.col, c.msg, c.fix)
			}
			if strings.Contains(err.Error(), "for policy `") {
				t.Errorf("validator's raw prefix leaked into %q", err)
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	src := "@id(\"one\") permit (principal, action == Palyra::Action::\"job.sumbit\", resource);\n" +
		"@id(\"two\") permit (principal is Palyra::Nod, action, resource);\n"
	_, err := Parse([]byte(src))
	var ids []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		ids = append(ids, e.(*Error).PolicyID)
	}
	if !slices.Equal(ids, []string{"one", "two"}) {
		t.Errorf("problems reported for %v, want [one two]: %v", ids, err)
	}
}

func TestParseIDs(t *testing.T) {
	s := mustParse(t, `permit (principal, action, resource);
@id("named") forbid (principal, action, resource) when { principal.name == "x" };
permit (principal is Palyra::Node, action, resource);`)
	if got, want := s.IDs(), []string{"policy0", "named", "policy2"}; !slices.Equal(got, want) {
		t.Errorf("IDs = %v, want %v", got, want)
	}
}

func TestParseTooBig(t *testing.T) {
	_, err := Parse(make([]byte, MaxSourceBytes+1))
	if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("oversized document: got %v", err)
	}
}

// TestFailedParseKeepsOldSet is the hot-reload contract: a bad document never
// replaces the live one.
func TestFailedParseKeepsOldSet(t *testing.T) {
	e := defaultEngine(t)
	old := e.Current()
	bad, err := Parse([]byte(`permit (principal, action == Palyra::Action::"job.sumbit", resource);`))
	if err == nil {
		t.Fatal("Parse accepted an unknown action")
	}
	e.Swap(bad) // nil: ignored
	if e.Current() != old {
		t.Fatal("engine replaced its set after a failed parse")
	}
	if d := e.Authorize(Request{Principal: plainDevice, Action: ActionJobSubmit, Resource: ClusterResource()}); !d.Allow {
		t.Errorf("old set no longer answers: %s", Explain(d))
	}
}
