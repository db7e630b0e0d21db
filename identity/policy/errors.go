package policy

import (
	"bytes"
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/x/exp/ast"
)

// Error is one problem Parse found: where it is, what is wrong and how to fix
// it. It wraps ErrInvalidPolicy. Parse may return several, joined.
type Error struct {
	Line, Col int    // 1-based; 0 if unknown
	PolicyID  string // "" for syntax errors
	Msg       string
	Fix       string
}

// Error reads `line 3:12 (policy "x"): unknown action "job.sumbit"; fix: did you mean "job.submit"?`.
func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d:%d", e.Line, e.Col)
	}
	if e.PolicyID != "" {
		fmt.Fprintf(&b, " (policy %q)", e.PolicyID)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Fix != "" {
		b.WriteString("; fix: " + e.Fix)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return ErrInvalidPolicy }

var syntaxRE = regexp.MustCompile(`<input>:(\d+):(\d+)(?: "((?:[^"\\]|\\.)*)")?:? (.*)$`)
var exactRE = regexp.MustCompile(`^exact got (.*) want (.*)$`)

// syntaxError turns a cedar-go parse error into an *Error with a fix.
func syntaxError(src []byte, err error) error {
	m := syntaxRE.FindStringSubmatch(err.Error())
	if m == nil {
		return &Error{Msg: "syntax error: " + err.Error(), Fix: syntaxDoc}
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	e := &Error{Line: line, Col: col, Msg: "syntax error: " + m[4], Fix: syntaxDoc}
	found := strconv.Quote(m[3])
	if m[3] == "" {
		found = "end of input"
	}
	switch x := exactRE.FindStringSubmatch(m[4]); {
	case x != nil && x[1] == "=":
		e.Msg, e.Fix = `syntax error: found "=" where "`+x[2]+`" belongs`, `compare with "==", e.g. action == Palyra::Action::"job.submit"`
	case x != nil:
		e.Msg = fmt.Sprintf("syntax error: expected %q, found %s", x[2], found)
		e.Fix = fmt.Sprintf("write %q here", x[2])
		if x[2] == ";" {
			e.Fix = `end every policy with ";"`
		}
	case m[4] == "invalid primary":
		e.Msg = "syntax error: expected an expression, found " + found
		e.Fix = "complete the expression before this point, e.g. when { principal.operator }"
	case strings.HasPrefix(m[4], "duplicate annotation"):
		e.Msg = "syntax error: " + m[4]
		e.Fix = "keep one of each annotation per policy"
	}
	return e
}

const syntaxDoc = "see https://docs.cedarpolicy.com/policies/syntax-grammar.html"

var (
	unknownActionRE = regexp.MustCompile("unrecognized action `[^`]*\"(.*)\"`")
	unknownTypeRE   = regexp.MustCompile("unrecognized entity type `(.*)`")
	unknownAttrRE   = regexp.MustCompile("attribute `(.*)` on entity type `(.*)` not found")
	unknownCtxRE    = regexp.MustCompile("attribute `(.*)` in context for .* not found")
	optionalCtxRE   = regexp.MustCompile("access to optional attribute `(.*)` in context")
	optionalAttrRE  = regexp.MustCompile("access to optional attribute `(.*)` on entity type")
	tagRE           = regexp.MustCompile("access to tag `\"(.*)\"` on entity type")
	policyPrefixRE  = regexp.MustCompile("^for policy `[^`]*`, ")
)

const noApplicableAction = "unable to find an applicable action"

// validatePolicy checks policy i of list against the schema and returns its
// problems, each placed as close to the offending text as can be found.
func validatePolicy(src []byte, list cedar.PolicyList, i int, id string) []error {
	p := list[i]
	start, end := p.Position().Offset, len(src)
	if i+1 < len(list) {
		end = list[i+1].Position().Offset
	}
	var raw []string
	if err := schemaModel.validator.Policy(id, astOf(p)); err != nil {
		raw = strings.Split(err.Error(), "\n")
	}
	var errs []*Error
	seen := map[string]bool{}
	add := func(needle string, e *Error) {
		if seen[e.Msg] {
			return
		}
		seen[e.Msg] = true
		e.PolicyID = id
		e.Line, e.Col = locate(src, start, end, needle)
		errs = append(errs, e)
	}
	others := false // problems other than "no applicable action"
	for i, r := range raw {
		raw[i] = policyPrefixRE.ReplaceAllString(r, "")
		others = others || (raw[i] != "" && !strings.HasPrefix(raw[i], noApplicableAction))
	}
	for _, r := range raw {
		if r == "" || (others && strings.HasPrefix(r, noApplicableAction)) {
			continue // the latter is a consequence of another error in the scope
		}
		add(explainValidation(r))
	}
	for _, name := range unknownHasAttrs(p) {
		add(name, &Error{Msg: fmt.Sprintf("no entity or context in the schema has an attribute %q, so this test is always false", name),
			Fix: suggest(name, keys(schemaModel.allAttrs), "")})
	}
	slices.SortFunc(errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col), strings.Compare(a.Msg, b.Msg))
	})
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return out
}

// explainValidation rewrites one schema-validator message in Palyra's words
// and returns the text to look for in the policy to place it.
func explainValidation(msg string) (needle string, e *Error) {
	if m := unknownActionRE.FindStringSubmatch(msg); m != nil {
		return `"` + m[1] + `"`, &Error{Msg: fmt.Sprintf("unknown action %q", m[1]),
			Fix: suggest(m[1], schemaModel.actionNames, `Palyra::Action::"%s"`)}
	}
	if m := unknownTypeRE.FindStringSubmatch(msg); m != nil {
		return m[1], &Error{Msg: "unknown entity type " + m[1], Fix: suggest(m[1], schemaModel.typeNames, "%s")}
	}
	if m := unknownAttrRE.FindStringSubmatch(msg); m != nil {
		return m[1], &Error{Msg: fmt.Sprintf("%s has no attribute %q", m[2], m[1]), Fix: attrFix(m[1], m[2])}
	}
	if m := unknownCtxRE.FindStringSubmatch(msg); m != nil {
		return m[1], &Error{Msg: fmt.Sprintf("context has no key %q in the schema", m[1]),
			Fix: suggest(m[1], schemaModel.context, "%q") + " (new keys are added to schema.cedarschema)"}
	}
	if m := optionalCtxRE.FindStringSubmatch(msg); m != nil {
		return m[1], &Error{Msg: fmt.Sprintf("context.%s may be absent", m[1]),
			Fix: fmt.Sprintf("test it first: context has %s && context.%s ...", m[1], m[1])}
	}
	if m := optionalAttrRE.FindStringSubmatch(msg); m != nil {
		return m[1], &Error{Msg: fmt.Sprintf("attribute %q may be absent", m[1]),
			Fix: fmt.Sprintf("test it first with 'has %s'", m[1])}
	}
	if m := tagRE.FindStringSubmatch(msg); m != nil {
		return "getTag", &Error{Msg: fmt.Sprintf("tag %q may be absent", m[1]),
			Fix: fmt.Sprintf("test it first: principal.hasTag(%q) && principal.getTag(%q) ...", m[1], m[1])}
	}
	if strings.HasPrefix(msg, noApplicableAction) {
		return "action", &Error{Msg: "no action in this policy's scope applies to its principal and resource types",
			Fix: `match actions to resources as the schema does: job.read/job.watch/job.cancel/worker.report take a Palyra::Job, grant.* a Palyra::Grant, the rest Palyra::Cluster::"default"`}
	}
	return "", &Error{Msg: msg, Fix: "check the expression's types against the Palyra schema (policy.Schema)"}
}

// attrFix says how to repair a read of attribute attr on entity type typ
// (full name) that the schema does not have.
func attrFix(attr, typ string) string {
	short := strings.TrimPrefix(typ, namespace)
	if attr == "labels" && (short == "Node" || short == "Device") {
		return `labels are tags: principal.hasTag("zone") && principal.getTag("zone") == "eu"`
	}
	// Look for the attribute on the other types of the same role.
	role, peers := "resource", []string{TypeCluster, TypeJob, TypeGrant}
	if short == "Node" || short == "Device" {
		role, peers = "principal", []string{"Device", "Node"}
	}
	var owners []string
	for _, t := range peers {
		if slices.Contains(schemaModel.attrs[t], attr) {
			owners = append(owners, namespace+t)
		}
	}
	if len(owners) > 0 {
		return fmt.Sprintf("%q belongs to %s; narrow the scope first, e.g. %s is %s", attr, strings.Join(owners, ", "), role, owners[0])
	}
	if len(schemaModel.attrs[short]) == 0 {
		return typ + " has no attributes"
	}
	return suggest(attr, schemaModel.attrs[short], "%q") + fmt.Sprintf(" (%s has: %s)", typ, strings.Join(schemaModel.attrs[short], ", "))
}

// unknownHasAttrs returns the names tested with `has` that no schema type has.
// The validator types such a test as false and lets it pass, which would hide
// a typo (a forbid that never fires).
func unknownHasAttrs(p *cedar.Policy) []string {
	var out []string
	for _, c := range astOf(p).Conditions {
		ast.Inspect(ast.NewNode(c.Body), func(n ast.IsNode) bool {
			if h, ok := n.(ast.NodeTypeHas); ok && !schemaModel.allAttrs[string(h.Value)] {
				out = append(out, string(h.Value))
			}
			return true
		})
	}
	return out
}

// locate returns the 1-based line and column of needle's first occurrence in
// src[start:end], or of start if needle is empty or absent.
func locate(src []byte, start, end int, needle string) (line, col int) {
	start, end = min(max(start, 0), len(src)), min(max(end, 0), len(src))
	at := start
	if i := bytes.Index(src[start:max(start, end)], []byte(needle)); needle != "" && i >= 0 {
		at = start + i
	}
	lineStart := bytes.LastIndexByte(src[:at], '\n') + 1
	return bytes.Count(src[:at], []byte("\n")) + 1, utf8.RuneCount(src[lineStart:at]) + 1
}

// suggest names the closest of known to got ("did you mean ...?"), or lists
// known when nothing is close. format renders one name.
func suggest(got string, known []string, format string) string {
	if format == "" {
		format = "%q"
	}
	best, bestD := "", max(2, len(got)/3)+1
	for _, k := range known {
		if d := editDistance(strings.ToLower(got), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return "did you mean " + fmt.Sprintf(format, best) + "?"
	}
	names := make([]string, len(known))
	for i, k := range known {
		names[i] = fmt.Sprintf(format, k)
	}
	return "use one of " + strings.Join(names, ", ")
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
