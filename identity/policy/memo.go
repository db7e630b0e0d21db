package policy

import (
	"bytes"
	"slices"
	"strconv"
	"sync"

	"github.com/cedar-policy/cedar-go"
)

// Remembered decisions.
//
// cedar.Authorize is a pure function of the policies, the entities and
// the request, and a Set is immutable, so a Set may remember what it
// decided for a request and answer the same request again without
// evaluating it. The API asks the same questions over and over (a device
// submitting jobs asks job.submit on the cluster with the same context
// each time), and evaluation with the conversion of the request is a few
// per cent of a node's CPU per job.
//
// A job's ID is new for every job, so a key holding it would never hit.
// It may be left out of the key when the decision cannot depend on it:
// a policy can only tell one resource of a type from another of the same
// type by naming an entity of that type (an entity literal, in a scope
// or a condition: `resource == Palyra::Job::"j-1"`, `resource in …`,
// `[…].contains(resource)`) or by comparing it with an entity value from
// elsewhere in the request. So a Set notes, from each policy's JSON
// form, which resource types no policy names an entity of (idBlind),
// and a request whose context and resource attributes are all plain
// strings, booleans and integers (no entity values) is keyed without
// its resource ID and parents when its type is one of them. Anything
// else (a cedar.Value, a list or a record) is not remembered at all.
//
// Decisions with evaluation errors are not remembered: their messages
// may name the request's resource. The memo is bounded (memoMax keys,
// then it starts again empty) and lives and dies with its Set, so a
// policy change can never be answered from an older policy's memo.

// memoMax bounds the keys a Set remembers.
const memoMax = 4096

// memo is a Set's remembered decisions.
type memo struct {
	mu sync.Mutex
	m  map[string]remembered
}

// remembered is a decision without its subject (which names the request).
type remembered struct {
	allow   bool
	reasons []string
	lines   []int
}

func (m *memo) get(key []byte) (remembered, bool) {
	m.mu.Lock()
	r, ok := m.m[string(key)]
	m.mu.Unlock()
	return r, ok
}

func (m *memo) put(key []byte, r remembered) {
	m.mu.Lock()
	if m.m == nil || len(m.m) >= memoMax {
		m.m = make(map[string]remembered, 64)
	}
	m.m[string(key)] = r
	m.mu.Unlock()
}

// idBlindTypes lists the resource types (short names) no policy in list
// names an entity of. A policy's JSON form spells every entity literal
// as {"type":"Palyra::T","id":…} (and `is` as "entity_type", which the
// leading quote below does not match), so a missing substring proves the
// type is never named; a spurious match only costs memo hits.
func idBlindTypes(list cedar.PolicyList) map[string]bool {
	blind := map[string]bool{TypeCluster: true, TypeJob: true, TypeGrant: true}
	for _, p := range list {
		js, err := p.MarshalJSON()
		if err != nil {
			return map[string]bool{}
		}
		for t := range blind {
			if bytes.Contains(js, []byte(`"type":"`+namespace+t+`"`)) {
				delete(blind, t)
			}
		}
	}
	return blind
}

// memoKey appends r's key to dst; ok is false when r is not remembered.
// Strings are length-prefixed and numbers and booleans end with ';', so
// no two requests share a key.
func (s *Set) memoKey(dst []byte, r Request) (key []byte, ok bool) {
	str := func(v string) {
		dst = strconv.AppendInt(dst, int64(len(v)), 10)
		dst = append(dst, ':')
		dst = append(dst, v...)
	}
	p := r.Principal
	str(p.Kind)
	str(p.ID)
	str(p.Name)
	dst = strconv.AppendBool(dst, p.Operator)
	dst = append(dst, ';')
	if dst, ok = appendMap(dst, p.Labels); !ok {
		return nil, false
	}
	str(r.Action)
	str(r.Resource.Type)
	if !s.idBlind[r.Resource.Type] {
		str(r.Resource.ID)
		dst = strconv.AppendInt(dst, int64(len(r.Resource.Parents)), 10)
		dst = append(dst, ';')
		for _, par := range r.Resource.Parents {
			str(par)
		}
	}
	if dst, ok = appendMap(dst, r.Resource.Attrs); !ok {
		return nil, false
	}
	return appendMap(dst, r.Context)
}

// appendMap appends m's entries in key order; ok is false when a value
// is not a plain string, bool or integer.
func appendMap[M ~map[string]V, V any](dst []byte, m M) ([]byte, bool) {
	dst = strconv.AppendInt(dst, int64(len(m)), 10)
	dst = append(dst, '{')
	if len(m) == 0 {
		return dst, true
	}
	var small [8]string // most maps here have one to three keys: no allocation
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		dst = strconv.AppendInt(dst, int64(len(k)), 10)
		dst = append(dst, ':')
		dst = append(dst, k...)
		switch v := any(m[k]).(type) {
		case string:
			dst = append(dst, 's')
			dst = strconv.AppendInt(dst, int64(len(v)), 10)
			dst = append(dst, ':')
			dst = append(dst, v...)
		case bool:
			dst = append(dst, 'b')
			dst = strconv.AppendBool(dst, v)
			dst = append(dst, ';')
		case int:
			dst = append(dst, 'i')
			dst = strconv.AppendInt(dst, int64(v), 10)
			dst = append(dst, ';')
		case int64:
			dst = append(dst, 'i')
			dst = strconv.AppendInt(dst, v, 10)
			dst = append(dst, ';')
		default:
			return nil, false
		}
	}
	return dst, true
}
