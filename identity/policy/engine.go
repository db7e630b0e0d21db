package policy

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/cedar-policy/cedar-go"
)

// Engine authorises requests against the live policy Set. It is safe for
// concurrent use; Swap replaces the set without blocking Authorize.
type Engine struct {
	set atomic.Pointer[Set]
}

// NewEngine returns an engine serving s. A nil s denies every request until
// a set is swapped in.
func NewEngine(s *Set) *Engine {
	e := &Engine{}
	e.set.Store(s)
	return e
}

// Swap makes s the live set for every later Authorize (hot reload). A nil s
// is ignored, so the engine keeps its old set when a new one failed to parse.
func (e *Engine) Swap(s *Set) {
	if s != nil {
		e.set.Store(s)
	}
}

// Current returns the live set (nil if none was ever given).
func (e *Engine) Current() *Set { return e.set.Load() }

// Authorize decides r (or answers from the decisions its set remembers,
// memo.go). It denies unless some policy permits r and no forbid
// applies. It also denies, naming the policy, when a forbid policy failed to
// evaluate (e.g. an attribute missing at run time): a broken forbid must not
// turn into an allow. A request that does not fit the schema (unknown action,
// wrong resource type, unconvertible attribute) is denied with an error.
func (e *Engine) Authorize(r Request) Decision {
	d := Decision{subject: r.Principal.String() + " to " + r.Action + " on " + r.Resource.String()}
	s := e.set.Load()
	if s == nil {
		d.Errors = []string{"no policy set is loaded"}
		return d
	}
	if err := checkRequest(r); err != nil {
		d.Errors = []string{"bad request: " + err.Error()}
		return d
	}
	var kb [256]byte
	key, remember := s.memoKey(kb[:0], r)
	if remember {
		if m, ok := s.memo.get(key); ok {
			d.Allow, d.Reasons, d.lines = m.allow, m.reasons, m.lines
			return d
		}
	}
	req, ents, err := cedarRequest(r)
	if err != nil {
		d.Errors = []string{"bad request: " + err.Error()}
		return d
	}
	dec, diag := cedar.Authorize(s.ps, ents, req)
	d.Allow = dec == cedar.Allow
	for _, re := range diag.Reasons {
		d.Reasons = append(d.Reasons, string(re.PolicyID))
	}
	for _, de := range diag.Errors {
		id := string(de.PolicyID)
		d.Errors = append(d.Errors, fmt.Sprintf("policy %s (line %d): %s", id, s.meta[id].line, de.Message))
		if s.meta[id].forbid {
			if d.Allow {
				d.Allow, d.Reasons = false, nil
			}
			d.Reasons = append(d.Reasons, id)
		}
	}
	// cedar-go lists reasons in no fixed order: in source order, the same
	// request is explained the same way every time.
	slices.SortFunc(d.Reasons, func(a, b string) int { return s.meta[a].order - s.meta[b].order })
	d.lines = make([]int, len(d.Reasons))
	for i, id := range d.Reasons {
		d.lines[i] = s.meta[id].line
	}
	if remember && len(d.Errors) == 0 {
		d.Reasons = slices.Clip(d.Reasons)
		s.memo.put(key, remembered{allow: d.Allow, reasons: d.Reasons, lines: d.lines})
	}
	return d
}
