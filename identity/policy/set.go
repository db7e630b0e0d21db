package policy

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
)

//go:embed default.cedar
var defaultSource []byte

// DefaultPolicy returns the policy a new cluster starts with (default.cedar).
func DefaultPolicy() []byte { return slices.Clone(defaultSource) }

// MaxSourceBytes bounds a policy document: it travels through Raft and is
// loaded on every node.
const MaxSourceBytes = 1 << 20

// ErrInvalidPolicy is wrapped by every error Parse returns.
var ErrInvalidPolicy = errors.New("invalid policy")

// Set is a parsed and validated policy document. It is immutable and safe to
// share between goroutines.
type Set struct {
	source []byte
	ps     *cedar.PolicySet
	ids    []string        // in source order
	meta   map[string]meta // by ID
	// idBlind holds the resource types no policy names an entity of:
	// their IDs cannot change a decision (memo.go).
	idBlind map[string]bool
	memo    memo
}

// meta is what Explain needs to know about one policy.
type meta struct {
	line   int
	forbid bool
	order  int // position in the document
}

// Source returns the document the set was parsed from.
func (s *Set) Source() []byte { return slices.Clone(s.source) }

// IDs returns the policies' IDs in source order: each policy's @id
// annotation, or "policy<N>" (N counting from 0) for a policy without one.
func (s *Set) IDs() []string { return slices.Clone(s.ids) }

// Parse parses src as Cedar policies and validates each against the schema.
// Errors wrap ErrInvalidPolicy, give line:column and say how to fix the
// policy; every problem found is reported, not only the first.
func Parse(src []byte) (set *Set, err error) {
	defer func() {
		// cedar-go's schema validator is experimental: a panic in it must
		// refuse the policy, not crash the node.
		if r := recover(); r != nil {
			set, err = nil, fmt.Errorf("%w: the validator failed on this document (%v); simplify the policy that was last edited", ErrInvalidPolicy, r)
		}
	}()
	if len(src) > MaxSourceBytes {
		return nil, fmt.Errorf("%w: document is %d bytes, the limit is %d; split rules into fewer, broader policies", ErrInvalidPolicy, len(src), MaxSourceBytes)
	}
	list, err := cedar.NewPolicyListFromBytes("", src)
	if err != nil {
		return nil, syntaxError(src, err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%w: the document has no policies, so every call would be denied, including policy.set; start from the default policy or the one in force ('palyra policy get' prints it) and edit that", ErrInvalidPolicy)
	}
	s := &Set{source: slices.Clone(src), ps: cedar.NewPolicySet(), meta: map[string]meta{}}
	var errs []error
	for i, p := range list {
		pos := p.Position()
		id := "policy" + strconv.Itoa(i)
		if v, ok := p.Annotations()["id"]; ok {
			id = string(v)
		}
		if !validID.MatchString(id) {
			errs = append(errs, &Error{Line: pos.Line, Col: pos.Column, PolicyID: id,
				Msg: fmt.Sprintf("@id(%q) is not a usable policy id", id), Fix: "use 1-64 letters, digits, '-', '_' or '.'"})
			continue
		}
		if prev, dup := s.meta[id]; dup {
			errs = append(errs, &Error{Line: pos.Line, Col: pos.Column, PolicyID: id,
				Msg: fmt.Sprintf("policy id %q is already used by the policy at line %d", id, prev.line), Fix: "give each policy its own @id"})
			continue
		}
		errs = append(errs, validatePolicy(src, list, i, id)...)
		s.ps.Add(cedar.PolicyID(id), p)
		s.ids = append(s.ids, id)
		s.meta[id] = meta{line: pos.Line, forbid: p.Effect() == cedar.Forbid, order: len(s.ids)}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s.idBlind = idBlindTypes(list)
	return s, nil
}

var validID = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

// astOf returns the AST the schema validator takes.
func astOf(p *cedar.Policy) *ast.Policy { return (*ast.Policy)(p.AST()) }
