package policy

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"
	"github.com/cedar-policy/cedar-go/x/exp/schema"
	"github.com/cedar-policy/cedar-go/x/exp/schema/resolved"
	"github.com/cedar-policy/cedar-go/x/exp/schema/validate"
)

//go:embed schema.cedarschema
var schemaSource []byte

// namespace prefixes every Palyra entity type: Palyra::Node, Palyra::Action.
const namespace = "Palyra::"

// actionType is the entity type of actions and action groups.
const actionType = cedar.EntityType(namespace + "Action")

// Schema returns the Cedar schema policies are validated against, for tools
// that show or check policies (e.g. the CLI).
func Schema() []byte { return slices.Clone(schemaSource) }

// model is what the package derives from the schema once: the validator for
// Parse, the action entities (with group membership) for Authorize, and the
// names used to check requests and suggest fixes.
type model struct {
	validator *validate.Validator
	// actions holds every action and action group with its parents.
	actions cedar.EntityMap
	// appliesTo maps a callable action to its principal and resource types
	// (short names: "Node", "Job").
	appliesTo map[string]appliesTo
	// attrs maps a short entity type name to its attribute names.
	attrs map[string][]string
	// required maps a short entity type name to its required attributes.
	required map[string][]string
	// context is every context key policies may read.
	context []string
	// allAttrs is every attribute name any entity or context may have.
	allAttrs map[string]bool
	// actionNames is every action and group name, for suggestions.
	actionNames []string
	// typeNames is every entity type's full name, for suggestions.
	typeNames []string
}

type appliesTo struct {
	principals, resources []string
}

// schemaModel is built at package init from the embedded schema; a broken
// schema fails every test in this package.
var schemaModel = mustLoadModel(schemaSource)

func mustLoadModel(src []byte) *model {
	m, err := loadModel(src)
	if err != nil {
		panic(fmt.Sprintf("policy: embedded schema.cedarschema is invalid: %v", err))
	}
	return m
}

func loadModel(src []byte) (*model, error) {
	var s schema.Schema
	s.SetFilename("schema.cedarschema")
	if err := s.UnmarshalCedar(src); err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	r, err := s.Resolve()
	if err != nil {
		return nil, fmt.Errorf("resolve schema: %w", err)
	}
	m := &model{
		validator: validate.New(r),
		actions:   cedar.EntityMap{},
		appliesTo: map[string]appliesTo{},
		attrs:     map[string][]string{},
		required:  map[string][]string{},
		allAttrs:  map[string]bool{},
	}
	for uid, a := range r.Actions {
		m.actions[uid] = a.Entity
		m.actionNames = append(m.actionNames, string(uid.ID))
		if a.AppliesTo != nil {
			m.appliesTo[string(uid.ID)] = appliesTo{
				principals: shortNames(a.AppliesTo.Principals),
				resources:  shortNames(a.AppliesTo.Resources),
			}
			addAttrNames(m.allAttrs, a.AppliesTo.Context)
			for k := range a.AppliesTo.Context {
				if !slices.Contains(m.context, string(k)) {
					m.context = append(m.context, string(k))
				}
			}
		}
	}
	for et, e := range r.Entities {
		short := strings.TrimPrefix(string(et), namespace)
		m.typeNames = append(m.typeNames, string(et))
		addAttrNames(m.allAttrs, e.Shape)
		for name, attr := range e.Shape {
			m.attrs[short] = append(m.attrs[short], string(name))
			if !attr.Optional {
				m.required[short] = append(m.required[short], string(name))
			}
		}
		slices.Sort(m.attrs[short])
		slices.Sort(m.required[short])
	}
	slices.Sort(m.context)
	slices.Sort(m.actionNames)
	slices.Sort(m.typeNames)
	return m, nil
}

func shortNames(ets []types.EntityType) []string {
	out := make([]string, len(ets))
	for i, et := range ets {
		out[i] = strings.TrimPrefix(string(et), namespace)
	}
	return out
}

// addAttrNames adds the attribute names of rec and of records nested in it.
func addAttrNames(dst map[string]bool, rec resolved.RecordType) {
	for name, attr := range rec {
		dst[string(name)] = true
		switch t := attr.Type.(type) {
		case resolved.RecordType:
			addAttrNames(dst, t)
		case resolved.SetType:
			if r, ok := t.Element.(resolved.RecordType); ok {
				addAttrNames(dst, r)
			}
		}
	}
}
