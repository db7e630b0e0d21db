package policy

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/cedar-policy/cedar-go"
)

// Principal is the caller, from its certificate and the registry.
type Principal struct {
	Kind     string // KindNode or KindDevice
	ID       string // "n-1a2b3c4d", "d-1a2b3c4d"
	Operator bool   // an operator (admin) device
	Labels   map[string]string
	Name     string
}

// String returns "node:ID" or "device:ID", the form of Job.submitter.
func (p Principal) String() string { return p.Kind + ":" + p.ID }

// Request is one API call to authorise.
type Request struct {
	Principal Principal
	Action    string // one of Actions()
	Resource  Resource
	Context   map[string]any // free-form; see the package doc for the keys policies may read
}

// Resource is what the call acts on. Attrs values may be strings, bools,
// integers, whole float64s, slices, maps with string keys, or cedar.Value.
type Resource struct {
	Type  string // TypeCluster, TypeJob or TypeGrant
	ID    string
	Attrs map[string]any
	// Parents are the IDs of resources of the same type this one is in
	// (for `resource in …`): a host grant's parent domains.
	Parents []string
}

// String returns "Cluster::default", the form Explain uses.
func (r Resource) String() string { return r.Type + "::" + r.ID }

// entities serves the request's principal and resource and the schema's
// action entities to cedar.Authorize without copying the action map.
type entities struct {
	principal, resource cedar.Entity
}

func (e *entities) Get(uid cedar.EntityUID) (cedar.Entity, bool) {
	switch uid {
	case e.principal.UID:
		return e.principal, true
	case e.resource.UID:
		return e.resource, true
	}
	a, ok := schemaModel.actions[uid]
	return a, ok
}

// checkRequest checks r against the schema. An error means the caller
// built a request no policy was written for: Authorize denies it.
func checkRequest(r Request) error {
	p, res := r.Principal, r.Resource
	if p.Kind != KindNode && p.Kind != KindDevice {
		return fmt.Errorf("principal kind %q is neither %q nor %q", p.Kind, KindNode, KindDevice)
	}
	if p.ID == "" {
		return fmt.Errorf("principal has no ID")
	}
	at, ok := schemaModel.appliesTo[r.Action]
	if !ok {
		return fmt.Errorf("unknown action %q; %s", r.Action, unknownActionFix(r.Action))
	}
	if !slices.Contains(at.resources, res.Type) {
		return fmt.Errorf("action %s takes a %v resource, not %q", r.Action, at.resources, res.Type)
	}
	if res.ID == "" {
		return fmt.Errorf("resource %s has no ID", res.Type)
	}
	for _, a := range schemaModel.required[res.Type] {
		if _, ok := res.Attrs[a]; !ok {
			return fmt.Errorf("resource %s lacks attribute %q", res, a)
		}
	}
	return nil
}

// cedarRequest converts r, which checkRequest accepted. An error names a
// value Cedar cannot hold.
func cedarRequest(r Request) (cedar.Request, *entities, error) {
	p, res := r.Principal, r.Resource
	ptype := "Device"
	if p.Kind == KindNode {
		ptype = "Node"
	}
	resAttrs, err := toRecord(res.Attrs, 0)
	if err != nil {
		return cedar.Request{}, nil, fmt.Errorf("resource %s: %w", res, err)
	}
	ctx, err := toRecord(r.Context, 0)
	if err != nil {
		return cedar.Request{}, nil, fmt.Errorf("context: %w", err)
	}
	tags := make(cedar.RecordMap, len(p.Labels))
	for k, v := range p.Labels {
		tags[cedar.String(k)] = cedar.String(v)
	}
	ents := &entities{
		principal: cedar.Entity{
			UID: cedar.NewEntityUID(namespace+cedar.EntityType(ptype), cedar.String(p.ID)),
			Attributes: cedar.NewRecord(cedar.RecordMap{
				"kind":     cedar.String(p.Kind),
				"id":       cedar.String(p.ID),
				"ref":      cedar.String(p.String()),
				"operator": cedar.Boolean(p.Operator),
				"name":     cedar.String(p.Name),
			}),
			Tags: cedar.NewRecord(tags),
		},
		resource: cedar.Entity{
			UID:        cedar.NewEntityUID(namespace+cedar.EntityType(res.Type), cedar.String(res.ID)),
			Attributes: resAttrs,
			Parents:    parentUIDs(res),
		},
	}
	return cedar.Request{
		Principal: ents.principal.UID,
		Action:    cedar.NewEntityUID(actionType, cedar.String(r.Action)),
		Resource:  ents.resource.UID,
		Context:   ctx,
	}, ents, nil
}

// unknownActionFix suggests the nearest action name, and lists them all:
// the message reaches people (palyra policy check), not only Go callers.
func unknownActionFix(got string) string {
	fix := "the actions are " + strings.Join(Actions(), ", ")
	if s := suggest(got, Actions(), "%s"); strings.HasPrefix(s, "did you mean") {
		fix = s + " " + fix
	}
	return fix
}

// maxDepth bounds nesting in attribute values (and breaks reference cycles).
const maxDepth = 16

func toRecord(m map[string]any, depth int) (cedar.Record, error) {
	rm := make(cedar.RecordMap, len(m))
	for k, v := range m {
		cv, err := toValue(v, depth+1)
		if err != nil {
			return cedar.Record{}, fmt.Errorf("%q: %w", k, err)
		}
		rm[cedar.String(k)] = cv
	}
	return cedar.NewRecord(rm), nil
}

// toValue converts a Go value to a Cedar value.
func toValue(v any, depth int) (cedar.Value, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case cedar.Value:
		return x, nil
	case string:
		return cedar.String(x), nil
	case bool:
		return cedar.Boolean(x), nil
	case map[string]any:
		return toRecord(x, depth)
	case float64:
		if x != math.Trunc(x) || x < math.MinInt64 || x >= math.MaxInt64 {
			return nil, fmt.Errorf("number %v is not a whole number Cedar can hold", x)
		}
		return cedar.Long(int64(x)), nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return cedar.Long(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if rv.Uint() > math.MaxInt64 {
			return nil, fmt.Errorf("number %d is too large for Cedar", rv.Uint())
		}
		return cedar.Long(int64(rv.Uint())), nil
	case reflect.String:
		return cedar.String(rv.String()), nil
	case reflect.Slice, reflect.Array:
		vals := make([]cedar.Value, rv.Len())
		for i := range vals {
			cv, err := toValue(rv.Index(i).Interface(), depth+1)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			vals[i] = cv
		}
		return cedar.NewSet(vals...), nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		rm := make(cedar.RecordMap, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			cv, err := toValue(it.Value().Interface(), depth+1)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", it.Key().String(), err)
			}
			rm[cedar.String(it.Key().String())] = cv
		}
		return cedar.NewRecord(rm), nil
	}
	return nil, fmt.Errorf("a %T cannot be passed to Cedar; use a string, bool, integer, slice or map[string]any", v)
}

// parentUIDs is r.Parents as entity UIDs of r's type.
func parentUIDs(r Resource) cedar.EntityUIDSet {
	if len(r.Parents) == 0 {
		return cedar.EntityUIDSet{}
	}
	uids := make([]cedar.EntityUID, len(r.Parents))
	for i, p := range r.Parents {
		uids[i] = cedar.NewEntityUID(namespace+cedar.EntityType(r.Type), cedar.String(p))
	}
	return cedar.NewEntityUIDSet(uids...)
}
