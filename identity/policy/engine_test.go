package policy

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

const forbidBad = `
@id("forbid-submit")
forbid (principal == Palyra::Device::"d-0bad0bad", action == Palyra::Action::"job.submit", resource);
`

func TestForbidBeatsPermit(t *testing.T) {
	src := string(DefaultPolicy()) + forbidBad
	line := strings.Count(string(DefaultPolicy()), "\n") + 2
	e := NewEngine(mustParse(t, src))
	bad := Principal{Kind: KindDevice, ID: "d-0bad0bad", Operator: true}

	d := e.Authorize(Request{Principal: bad, Action: ActionJobSubmit, Resource: ClusterResource()})
	if d.Allow {
		t.Fatalf("forbidden device allowed: %s", Explain(d))
	}
	if want := fmt.Sprintf("deny by policy forbid-submit (line %d), which forbids device:d-0bad0bad to job.submit on Cluster::default", line); Explain(d) != want {
		t.Errorf("Explain = %q, want %q", Explain(d), want)
	}
	// The forbid is narrow: the same device may still do other things, and
	// other devices may still submit.
	if d := e.Authorize(Request{Principal: bad, Action: ActionJobList, Resource: ClusterResource()}); !d.Allow {
		t.Errorf("forbid leaked to job.list: %s", Explain(d))
	}
	if d := e.Authorize(Request{Principal: plainDevice, Action: ActionJobSubmit, Resource: ClusterResource()}); !d.Allow {
		t.Errorf("forbid leaked to another device: %s", Explain(d))
	}
}

func TestSwapReloads(t *testing.T) {
	e := defaultEngine(t)
	req := Request{Principal: Principal{Kind: KindDevice, ID: "d-0bad0bad"}, Action: ActionJobSubmit, Resource: ClusterResource()}
	if !e.Authorize(req).Allow {
		t.Fatal("default policy should let a device submit")
	}
	e.Swap(mustParse(t, string(DefaultPolicy())+forbidBad))
	if d := e.Authorize(req); d.Allow {
		t.Fatalf("swapped-in forbid not applied: %s", Explain(d))
	}
}

// TestConcurrentAuthorizeAndSwap runs under -race: every decision must come
// whole from one of the two sets being swapped.
func TestConcurrentAuthorizeAndSwap(t *testing.T) {
	permitSet := mustParse(t, string(DefaultPolicy()))
	forbidSet := mustParse(t, string(DefaultPolicy())+forbidBad)
	e := NewEngine(permitSet)
	req := Request{Principal: Principal{Kind: KindDevice, ID: "d-0bad0bad"}, Action: ActionJobSubmit, Resource: ClusterResource()}

	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			for range 500 {
				d := e.Authorize(req)
				ok := (d.Allow && slices.Equal(d.Reasons, []string{"devices"})) ||
					(!d.Allow && slices.Equal(d.Reasons, []string{"forbid-submit"}))
				if !ok || len(d.Errors) > 0 {
					errs <- Explain(d)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 500 {
			e.Swap([]*Set{permitSet, forbidSet}[i%2])
			_ = e.Current().IDs()
		}
	})
	wg.Wait()
	close(errs)
	for msg := range errs {
		t.Errorf("inconsistent decision: %s", msg)
	}
}

func TestBadRequestsDenied(t *testing.T) {
	e := defaultEngine(t)
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	cases := []struct {
		name string
		req  Request
		want string
	}{
		{"unknown kind", Request{Principal: Principal{Kind: "robot", ID: "r-1"}, Action: ActionJobSubmit, Resource: ClusterResource()}, `kind "robot"`},
		{"no id", Request{Principal: Principal{Kind: KindDevice, Operator: true}, Action: ActionJobSubmit, Resource: ClusterResource()}, "no ID"},
		{"unknown action", Request{Principal: opDevice, Action: "job.sumbit", Resource: ClusterResource()}, `unknown action "job.sumbit"`},
		{"action group", Request{Principal: opDevice, Action: "admin", Resource: ClusterResource()}, `unknown action "admin"`},
		{"wrong resource type", Request{Principal: opDevice, Action: ActionJobCancel, Resource: ClusterResource()}, "takes a [Job] resource"},
		{"job without submitter", Request{Principal: opDevice, Action: ActionJobCancel, Resource: Resource{Type: TypeJob, ID: "j-1", Attrs: map[string]any{"kind": "wasm"}}}, `lacks attribute "submitter"`},
		{"unconvertible context", Request{Principal: opDevice, Action: ActionJobSubmit, Resource: ClusterResource(), Context: map[string]any{"ch": make(chan int)}}, "chan int cannot be passed"},
		{"cyclic context", Request{Principal: opDevice, Action: ActionJobSubmit, Resource: ClusterResource(), Context: cyclic}, "nested deeper"},
		{"fractional number", Request{Principal: opDevice, Action: ActionJobSubmit, Resource: ClusterResource(), Context: map[string]any{"n": 1.5}}, "not a whole number"},
		{"huge unsigned", Request{Principal: opDevice, Action: ActionJobSubmit, Resource: ClusterResource(), Context: map[string]any{"n": uint64(1) << 63}}, "too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := e.Authorize(c.req)
			if d.Allow || len(d.Errors) != 1 || !strings.Contains(d.Errors[0], c.want) {
				t.Errorf("got %s, want deny with error containing %q", Explain(d), c.want)
			}
		})
	}
}

// An unknown action (palyra policy check --action job.frobnicate) is
// answered with the action names a person can type, not a Go identifier.
func TestUnknownActionListsActions(t *testing.T) {
	e := defaultEngine(t)
	for _, c := range []struct{ action, mean string }{{"job.frobnicate", ""}, {"job.sumbit", "did you mean job.submit?"}} {
		d := e.Authorize(Request{Principal: opDevice, Action: c.action, Resource: ClusterResource()})
		if d.Allow || len(d.Errors) != 1 {
			t.Fatalf("%s: got %s, want deny with one error", c.action, Explain(d))
		}
		msg := d.Errors[0]
		if strings.Contains(msg, "constant") || !strings.Contains(msg, ActionJobSubmit+", ") || !strings.Contains(msg, ActionGrantKV) {
			t.Errorf("%s: error %q does not list the action names", c.action, msg)
		}
		if c.mean != "" && !strings.Contains(msg, c.mean) {
			t.Errorf("%s: error %q lacks %q", c.action, msg, c.mean)
		}
	}
}

func TestNoSetDeniesAll(t *testing.T) {
	e := NewEngine(nil)
	d := e.Authorize(Request{Principal: opDevice, Action: ActionPolicySet, Resource: ClusterResource()})
	if d.Allow || len(d.Errors) == 0 {
		t.Errorf("engine without a set: %s", Explain(d))
	}
}

// TestFailingForbidDenies: a forbid that cannot be evaluated must not let a
// permit through.
func TestFailingForbidDenies(t *testing.T) {
	e := NewEngine(mustParse(t, string(DefaultPolicy())+`
@id("no-browser")
forbid (principal, action == Palyra::Action::"job.submit", resource)
when { context has job_kind && context.job_kind like "brows*" };`))
	req := Request{Principal: plainDevice, Action: ActionJobSubmit, Resource: ClusterResource()}

	req.Context = map[string]any{"job_kind": "browser"}
	if d := e.Authorize(req); d.Allow || !slices.Equal(d.Reasons, []string{"no-browser"}) {
		t.Errorf("browser job: %s", Explain(d))
	}
	req.Context = map[string]any{"job_kind": "wasm"}
	if d := e.Authorize(req); !d.Allow {
		t.Errorf("wasm job: %s", Explain(d))
	}
	req.Context = map[string]any{"job_kind": 7} // `like` on a Long fails at run time
	d := e.Authorize(req)
	if d.Allow || !slices.Equal(d.Reasons, []string{"no-browser"}) || len(d.Errors) != 1 {
		t.Errorf("erroring forbid: %s", Explain(d))
	}
	if !strings.Contains(Explain(d), "deny by policy no-browser") || !strings.Contains(Explain(d), "errors: policy no-browser") {
		t.Errorf("Explain does not name the failing forbid: %s", Explain(d))
	}
}

// TestLabelsAndContext: labels reach policies as tags and context as a record.
func TestLabelsAndContext(t *testing.T) {
	e := NewEngine(mustParse(t, `
@id("ci-egress")
permit (principal is Palyra::Device, action == Palyra::Action::"grant.http", resource is Palyra::Grant)
when {
  principal.hasTag("team") && principal.getTag("team") == "ci" &&
  resource.type == "http" && context has grant_host && context.grant_host like "*.example.com"
};`))
	ci := Principal{Kind: KindDevice, ID: "d-c1c1c1c1", Labels: map[string]string{"team": "ci"}}
	req := func(p Principal, host string) Request {
		return Request{Principal: p, Action: ActionGrantHTTP, Resource: GrantResource(GrantHTTP, host),
			Context: map[string]any{"grant_host": host, "extra": []any{"passed", int32(1), map[string]string{"k": "v"}}}}
	}
	if d := e.Authorize(req(ci, "api.example.com")); !d.Allow {
		t.Errorf("ci device, allowed host: %s", Explain(d))
	}
	if d := e.Authorize(req(ci, "evil.test")); d.Allow {
		t.Errorf("ci device, other host: %s", Explain(d))
	}
	if d := e.Authorize(req(plainDevice, "api.example.com")); d.Allow {
		t.Errorf("unlabelled device: %s", Explain(d))
	}
}

func TestExplainForms(t *testing.T) {
	cases := []struct {
		d    Decision
		want string
	}{
		{Decision{Allow: true, Reasons: []string{"a", "b"}}, "allow by policies a, b"},
		{Decision{Reasons: []string{"f"}, lines: []int{3}}, "deny by policy f (line 3)"},
		{Decision{Reasons: []string{"f"}, lines: []int{3}, subject: "device:d-1 to grant.http on Grant::localhost"}, "deny by policy f (line 3), which forbids device:d-1 to grant.http on Grant::localhost"},
		{Decision{}, "deny: no policy permits the request"},
		{Decision{Errors: []string{"bad request: x"}}, "deny: no policy permits the request; errors: bad request: x"},
	}
	for _, c := range cases {
		if got := Explain(c.d); got != c.want {
			t.Errorf("Explain(%+v) = %q, want %q", c.d, got, c.want)
		}
	}
}
